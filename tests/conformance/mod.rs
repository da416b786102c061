//! The lease store conformance suite: written once, run against every backend.
//!
//! Each `tests/conformance_<target>.rs` file names a [`Target`] and expands
//! [`conformance_suite!`]; the test names then read `conformance_<target>::<case>`, so the
//! test output says which targets ran.

#![allow(dead_code)]

pub mod cases;
#[cfg(feature = "dynamodb")]
pub mod dynamo_cases;

use std::future::Future;

use shardlease::store::memory::InMemoryStore;
use shardlease::LeaseStore;

/// A backend under test: it makes a fresh, empty table for each test.
pub trait Target: Send + Sync + 'static {
    /// The store type.
    type Store: LeaseStore + Clone;

    /// A store on a fresh table of its own, with default listing pages.
    fn store(&self, test: &str) -> impl Future<Output = Self::Store> + Send;

    /// A store on a fresh table of its own whose listing pages hold `page` items.
    fn paged_store(&self, test: &str, page: u32) -> impl Future<Output = Self::Store> + Send;
}

/// The in-memory store.
pub struct Memory;

impl Target for Memory {
    type Store = InMemoryStore;

    async fn store(&self, _test: &str) -> InMemoryStore {
        InMemoryStore::new()
    }

    async fn paged_store(&self, _test: &str, page: u32) -> InMemoryStore {
        InMemoryStore::new().with_page_size(page as usize)
    }
}

#[cfg(feature = "dynamodb")]
#[path = "../common/dynamo.rs"]
pub mod dynamo;

/// The DynamoDB store on an emulator.
#[cfg(feature = "dynamodb")]
pub struct Dynamo(pub dynamo::Emulator);

#[cfg(feature = "dynamodb")]
impl Target for Dynamo {
    type Store = shardlease::store::dynamodb::DynamoStore;

    async fn store(&self, test: &str) -> Self::Store {
        let config = shardlease::store::dynamodb::DynamoConfig::new(dynamo::unique_table(test));
        self.0.store(config).await
    }

    async fn paged_store(&self, test: &str, page: u32) -> Self::Store {
        let mut config = shardlease::store::dynamodb::DynamoConfig::new(dynamo::unique_table(test));
        config.page_limit = Some(page);
        self.0.store(config).await
    }
}

/// Expands to one `#[tokio::test]` per case of [`cases`] over `$target`.
#[macro_export]
macro_rules! conformance_suite {
    ($target:expr) => {
        $crate::conformance_suite!(@cases $target;
            create_is_conditional_on_absence,
            get_reads_what_was_written_and_none_when_absent,
            renew_needs_owner_and_tenure,
            take_is_conditional_on_the_observed_counter,
            request_handoff_names_one_requester,
            complete_handoff_moves_to_the_requester_in_a_new_tenure,
            the_owner_incarnation_follows_every_change_of_owner,
            release_leaves_the_lease_unowned,
            checkpoint_is_fenced_by_tenure,
            a_stale_checkpoint_after_re_take_is_rejected,
            renewals_and_checkpoints_do_not_race,
            a_late_checkpoint_never_replaces_a_later_one_of_its_tenure,
            delete_is_conditional_on_counter_and_tenure,
            a_write_meant_for_a_deleted_item_never_lands_in_its_successor,
            a_re_created_lease_has_a_nonce_of_its_own,
            heartbeat_creates_and_refreshes_membership,
            remove_member_is_conditional,
            listing_pages_through_many_small_pages,
            listing_separates_leases_from_members,
            sixteen_concurrent_takers_have_exactly_one_winner,
            give_is_conditional_on_the_observed_counter,
            a_session_opens_once_and_is_replaced_only_as_observed,
            a_record_says_which_protocol_wrote_it,
            beats_return_notices_until_they_are_seen,
            end_session_is_conditional_on_incarnation_and_heartbeat,
            a_load_report_round_trips_through_heartbeat_and_beat,
            without_a_report_the_last_one_stays_and_an_empty_part_is_removed,
            open_session_clears_the_load_report,
            a_bad_load_report_is_refused_and_nothing_is_written,
        );
    };
    (@cases $target:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::conformance::cases::$case(&$target, stringify!($case)).await;
            }
        )*
    };
}
