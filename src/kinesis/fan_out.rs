//! Enhanced fan-out: the stream consumer registered (or found) and waited for until active
//! ([`register`]), and a shard read through `SubscribeToShard` ([`Fetcher::subscribed`]): the
//! records Kinesis pushes are handed to the record loop as the polling fetcher hands its
//! answers, through the same queue (the subscription is read only while there is room, so a
//! slow processor holds the stream back instead of piling records up).
//!
//! A subscription lasts 5 minutes: when Kinesis ends it (or when this side's 5 minutes are
//! up), the next one starts after the last record delivered (the event's continuation sequence
//! number). A subscription refused because another one of this consumer to the shard is still
//! live (`ResourceInUseException`: the previous reader of a lease that just moved, until
//! Kinesis sees its connection closed), throttled, or failing for a passing reason is tried
//! again after a backoff; one refused for good (no such consumer or shard, a key it cannot
//! use) ends the loop as a refused read does. When the record loop stops (a handoff, a
//! shutdown), the subscription is dropped before the processor's last checkpoint.

use std::time::Duration;

use aws_sdk_kinesis::types::error::SubscribeToShardEventStreamError as StreamFailure;
use aws_sdk_kinesis::types::{ConsumerStatus, StartingPosition, SubscribeToShardEventStream};
use tokio::time::Instant;

use super::fetch::{starting, to_record, Backoff, Fetched, Fetcher, Handing};
use super::processor::{KinesisRecord, StartPosition};
use super::{classify, describe, Failure};

/// How long Kinesis keeps a subscription open; a new one starts when it ends.
const SUBSCRIPTION: Duration = Duration::from_secs(5 * 60);

/// How long [`register`] waits for the stream consumer to become active.
const ACTIVE_WITHIN: Duration = Duration::from_secs(120);

/// How often [`register`] looks at a consumer that is not active yet.
const ACTIVE_POLL: Duration = Duration::from_millis(500);

/// The stream consumer `name` of `stream` (its name, and its ARN when known; else the ARN is
/// asked with `DescribeStreamSummary`): registered if it does not exist, then waited for
/// until it is active (at most [`ACTIVE_WITHIN`]). Its ARN, or why not (one line).
pub(super) async fn register(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    stream_arn: Option<&str>,
    name: &str,
) -> Result<String, String> {
    let stream_arn = match stream_arn {
        Some(arn) => arn.to_owned(),
        None => client
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
            .map_err(|err| format!("DescribeStreamSummary: {}", describe(&err)))?
            .stream_description_summary()
            .map(|s| s.stream_arn().to_owned())
            .ok_or("DescribeStreamSummary returned no stream ARN")?,
    };
    let registered = client
        .register_stream_consumer()
        .stream_arn(&stream_arn)
        .consumer_name(name)
        .send()
        .await;
    match registered {
        Ok(_) => tracing::info!(consumer = name, "stream consumer registered"),
        // Registered already (by another worker of this application, or an earlier run).
        Err(err)
            if err
                .as_service_error()
                .is_some_and(|e| e.is_resource_in_use_exception()) => {}
        Err(err) => return Err(format!("RegisterStreamConsumer: {}", describe(&err))),
    }
    let until = Instant::now() + ACTIVE_WITHIN;
    loop {
        let described = client
            .describe_stream_consumer()
            .stream_arn(&stream_arn)
            .consumer_name(name)
            .send()
            .await
            .map_err(|err| format!("DescribeStreamConsumer: {}", describe(&err)))?;
        let consumer = described
            .consumer_description()
            .ok_or("DescribeStreamConsumer returned no consumer")?;
        if *consumer.consumer_status() == ConsumerStatus::Active {
            return Ok(consumer.consumer_arn().to_owned());
        }
        if Instant::now() >= until {
            return Err(format!(
                "the stream consumer is still {} after {ACTIVE_WITHIN:?}",
                consumer.consumer_status().as_str()
            ));
        }
        tokio::time::sleep(ACTIVE_POLL).await;
    }
}

/// What a failed subscription (refused, or ended by an error event) leads to.
enum Failed {
    /// Subscribe again after a backoff.
    Again,
    /// Stop reading: the loop ends with this error.
    Refused(String),
}

/// A failure of `SubscribeToShard`'s event stream: `ResourceInUseException` (another
/// subscription of this consumer to the shard is live), throttling and internal failures pass;
/// a missing consumer or shard, or a key the stream cannot use, does not.
fn stream_failure(failure: &StreamFailure, text: String) -> Failed {
    match failure {
        StreamFailure::ResourceInUseException(_)
        | StreamFailure::InternalFailureException(_)
        | StreamFailure::KmsThrottlingException(_) => Failed::Again,
        StreamFailure::ResourceNotFoundException(_)
        | StreamFailure::KmsDisabledException(_)
        | StreamFailure::KmsInvalidStateException(_)
        | StreamFailure::KmsAccessDeniedException(_)
        | StreamFailure::KmsNotFoundException(_)
        | StreamFailure::KmsOptInRequired(_) => Failed::Refused(text),
        _ => Failed::Again,
    }
}

/// How following a subscription ended.
enum Followed {
    /// It ended or failed: subscribe again (after a backoff, when it failed).
    Again,
    /// The loop ends with this last item (the shard's end, or a refusal).
    Last(Fetched),
    /// The record loop is gone.
    Gone,
}

/// A subscription: its event stream is `event_stream`.
type Subscription = aws_sdk_kinesis::operation::subscribe_to_shard::SubscribeToShardOutput;

/// What a fetcher keeps from one subscription to the next: where the next one starts, the
/// backoff, and what hands the events' records on.
struct Following {
    position: StartPosition,
    backoff: Backoff,
    handing: Handing,
}

impl Fetcher<'_> {
    /// Reads the shard through subscriptions of the stream consumer `consumer_arn`, from
    /// `position`, until the shard ends or Kinesis refuses it, handing what it pushes on;
    /// returns after the last item (or when the record loop is gone).
    pub(super) async fn subscribed(self, consumer_arn: &str, position: StartPosition) {
        let config = &self.context.config;
        let mut following = Following {
            backoff: Backoff::new(config.min_call_interval, config.max_backoff),
            handing: Handing::new(config, &position),
            position,
        };
        loop {
            let mut events = match self.subscribe(consumer_arn, &mut following).await {
                Ok(Some(events)) => events,
                Ok(None) => continue,
                Err(refused) => return self.hand(refused),
            };
            match self.follow(&mut events, &mut following).await {
                Followed::Again => {}
                Followed::Last(last) => return self.hand(last),
                Followed::Gone => return,
            }
        }
    }

    /// A subscription from the position; `None` after a failure worth retrying (waited out
    /// already), the item that ends the loop when Kinesis refuses for good.
    async fn subscribe(
        &self,
        consumer_arn: &str,
        following: &mut Following,
    ) -> Result<Option<Subscription>, Fetched> {
        let config = &self.context.config;
        let (kind, sequence, at) = starting(&following.position);
        let start = StartingPosition::builder()
            .r#type(kind)
            .set_sequence_number(sequence.map(str::to_owned))
            .set_timestamp(at)
            .build()
            .expect("a starting position names its type");
        let request = self
            .context
            .client
            .subscribe_to_shard()
            .consumer_arn(consumer_arn)
            .shard_id(&self.shard)
            .starting_position(start)
            .send();
        let failure = match tokio::time::timeout(config.call_timeout, request).await {
            Ok(Ok(output)) => return Ok(Some(output)),
            Ok(Err(err)) => {
                let text = describe(&err);
                let in_use = err
                    .as_service_error()
                    .is_some_and(|e| e.is_resource_in_use_exception());
                if classify(&err) == Failure::Fatal && !in_use {
                    return Err(Fetched::Refused(format!("SubscribeToShard: {text}")));
                }
                text
            }
            Err(_) => format!("unanswered within {:?}", config.call_timeout),
        };
        let wait = following.backoff.wait();
        tracing::warn!(error = %failure, ?wait, "SubscribeToShard failed; backing off");
        tokio::time::sleep(wait).await;
        Ok(None)
    }

    /// Hands on what the subscription pushes, while the queue has room, until it ends.
    async fn follow(&self, events: &mut Subscription, following: &mut Following) -> Followed {
        let config = &self.context.config;
        let renew_at = Instant::now() + SUBSCRIPTION;
        let mut events_seen = 0_u64;
        loop {
            self.queue.room().await;
            let next = tokio::select! {
                next = tokio::time::timeout(config.call_timeout, events.event_stream.recv()) => next,
                () = tokio::time::sleep_until(renew_at) => return Followed::Again,
            };
            let event = match next {
                Ok(Ok(Some(SubscribeToShardEventStream::SubscribeToShardEvent(event)))) => event,
                // An event of a kind this SDK does not know: nothing to deliver.
                Ok(Ok(Some(_))) => continue,
                // Ended by Kinesis (its 5 minutes): the next one goes on from here. One ended
                // before its first event is a failure all the same: not tried again at once.
                Ok(Ok(None)) => {
                    if events_seen == 0 {
                        let wait = following.backoff.wait();
                        tracing::warn!(?wait, "the subscription ended before its first event; subscribing again after a backoff");
                        tokio::time::sleep(wait).await;
                    }
                    return Followed::Again;
                }
                Ok(Err(err)) => {
                    let text = describe(&err);
                    if let Some(Failed::Refused(text)) = err
                        .as_service_error()
                        .map(|failure| stream_failure(failure, text.clone()))
                    {
                        return Followed::Last(Fetched::Refused(format!(
                            "SubscribeToShard: {text}"
                        )));
                    }
                    let wait = following.backoff.wait();
                    tracing::warn!(error = %text, ?wait, "the subscription failed; subscribing again after a backoff");
                    tokio::time::sleep(wait).await;
                    return Followed::Again;
                }
                Err(_) => {
                    tracing::warn!(timeout = ?config.call_timeout, "no event from the subscription; subscribing again");
                    return Followed::Again;
                }
            };
            events_seen += 1;
            following.backoff.reset();
            let continuation = event.continuation_sequence_number();
            let ended = continuation.is_empty() || !event.child_shards().is_empty();
            if !self.hand_event(&event, following).await {
                return Followed::Gone;
            }
            // The shard's end: its last records were in this event, and Kinesis names the
            // children (no continuation then).
            if ended {
                return Followed::Last(Fetched::End);
            }
        }
    }

    /// Hands one event's records on (none: the shard is quiet, which the loop counts as
    /// progress, as an empty `GetRecords` answer), and moves the position past them; false
    /// when the record loop is gone.
    async fn hand_event(
        &self,
        event: &aws_sdk_kinesis::types::SubscribeToShardEvent,
        following: &mut Following,
    ) -> bool {
        let records: Vec<KinesisRecord> = event.records().iter().map(to_record).collect();
        let continuation = event.continuation_sequence_number();
        if !continuation.is_empty() {
            following.position = StartPosition::AfterSequenceNumber(continuation.to_owned());
        } else if let Some(last) = records.last() {
            following.position = StartPosition::AfterSequenceNumber(last.sequence_number.clone());
        }
        let behind = Some(event.millis_behind_latest());
        self.hand_records(records, behind, &mut following.handing)
            .await
            .is_some()
    }
}
