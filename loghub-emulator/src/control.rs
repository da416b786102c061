//! The test-control side: injected faults and counts of calls, served under `/_emulator/`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;

/// Which call a request is, as far as faults and counts are concerned.
#[derive(Debug, Clone)]
pub struct Call {
    /// The API's name as the reference names it (`PullLogs`, `ListShards`, ...).
    pub api: &'static str,
    /// The project, if the call names one.
    pub project: Option<String>,
    /// The logstore, if the call names one.
    pub logstore: Option<String>,
    /// The shard, if the call names one.
    pub shard: Option<i64>,
}

/// One injected fault, as `POST /_emulator/faults` takes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// The API it hits.
    pub api: String,
    /// Only calls on this project.
    #[serde(default)]
    pub project: Option<String>,
    /// Only calls on this logstore.
    #[serde(default)]
    pub logstore: Option<String>,
    /// Only calls on this shard.
    #[serde(default)]
    pub shard: Option<i64>,
    /// The status of the error answer; no status: the call is only delayed, then served.
    #[serde(default)]
    pub status: Option<u16>,
    /// `errorCode` of the answer.
    #[serde(default, rename = "errorCode")]
    pub error_code: Option<String>,
    /// `errorMessage` of the answer.
    #[serde(default, rename = "errorMessage")]
    pub error_message: Option<String>,
    /// How many matching calls it hits (default 1).
    #[serde(default = "one")]
    pub times: u32,
    /// Milliseconds to wait before answering (default 0).
    #[serde(default, rename = "delayMs")]
    pub delay_ms: u64,
}

fn one() -> u32 {
    1
}

/// What a fault does to one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// Wait this long first.
    pub delay: Duration,
    /// Then answer this error, or serve the call.
    pub error: Option<ApiError>,
}

impl Fault {
    /// Checks the fault makes sense.
    pub fn validate(&self) -> Result<(), String> {
        if self.times == 0 {
            return Err("times must be at least 1".into());
        }
        match (self.status, &self.error_code) {
            (None, Some(_)) => Err("errorCode needs a status".into()),
            (Some(s), _) if !(400..=599).contains(&s) => Err("status must be 400 to 599".into()),
            (None, None) if self.delay_ms == 0 => Err("a fault needs a status or delayMs".into()),
            _ => Ok(()),
        }
    }

    fn matches(&self, call: &Call) -> bool {
        self.api == call.api
            && self
                .project
                .as_ref()
                .is_none_or(|p| call.project.as_ref() == Some(p))
            && self
                .logstore
                .as_ref()
                .is_none_or(|l| call.logstore.as_ref() == Some(l))
            && self.shard.is_none_or(|s| call.shard == Some(s))
    }
}

/// The faults waiting to hit, and the counts of calls.
#[derive(Debug, Default)]
pub struct Control {
    faults: Vec<Fault>,
    calls: BTreeMap<&'static str, u64>,
    pulls: BTreeMap<String, u64>,
}

impl Control {
    /// Adds a fault; the earliest added that matches hits first.
    pub fn add_fault(&mut self, fault: Fault) {
        self.faults.push(fault);
    }

    /// Removes every fault.
    pub fn clear_faults(&mut self) {
        self.faults.clear();
    }

    /// Counts a call and takes one hit of the first fault that matches it.
    pub fn on_call(&mut self, call: &Call) -> Option<Hit> {
        *self.calls.entry(call.api).or_insert(0) += 1;
        if call.api == "PullLogs" {
            let key = format!(
                "{}/{}/{}",
                call.project.as_deref().unwrap_or(""),
                call.logstore.as_deref().unwrap_or(""),
                call.shard.unwrap_or(-1)
            );
            *self.pulls.entry(key).or_insert(0) += 1;
        }
        let index = self.faults.iter().position(|f| f.matches(call))?;
        let fault = &mut self.faults[index];
        fault.times -= 1;
        let hit = Hit {
            delay: Duration::from_millis(fault.delay_ms),
            error: fault.status.map(|status| {
                ApiError::new(
                    status,
                    fault
                        .error_code
                        .clone()
                        .unwrap_or_else(|| "InternalServerError".into()),
                    fault
                        .error_message
                        .clone()
                        .unwrap_or_else(|| "injected by the emulator".into()),
                )
            }),
        };
        if fault.times == 0 {
            self.faults.remove(index);
        }
        Some(hit)
    }

    /// The counts: `{"apis": {"PullLogs": 3, ...}, "pullLogs": {"project/logstore/shard": 2}}`.
    pub fn counts(&self) -> Value {
        json!({ "apis": self.calls, "pullLogs": self.pulls })
    }

    /// Forgets the counts.
    pub fn reset_counts(&mut self) {
        self.calls.clear();
        self.pulls.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pull(shard: i64) -> Call {
        Call {
            api: "PullLogs",
            project: Some("p".into()),
            logstore: Some("l".into()),
            shard: Some(shard),
        }
    }

    #[test]
    fn a_fault_hits_the_given_number_of_matching_calls() {
        let mut control = Control::default();
        let fault: Fault = serde_json::from_value(json!({
            "api": "PullLogs", "shard": 1, "status": 403, "errorCode": "ReadQuotaExceed", "times": 2
        }))
        .unwrap();
        fault.validate().unwrap();
        control.add_fault(fault);
        assert_eq!(control.on_call(&pull(0)), None);
        for _ in 0..2 {
            let hit = control.on_call(&pull(1)).unwrap();
            assert_eq!(hit.error.unwrap().code, "ReadQuotaExceed");
        }
        assert_eq!(control.on_call(&pull(1)), None);
        assert_eq!(control.counts()["apis"]["PullLogs"], 4);
        assert_eq!(control.counts()["pullLogs"]["p/l/1"], 3);
        control.reset_counts();
        assert_eq!(control.counts(), json!({"apis": {}, "pullLogs": {}}));
    }

    #[test]
    fn faults_that_make_no_sense_are_refused() {
        let parse = |v: Value| serde_json::from_value::<Fault>(v).unwrap().validate();
        assert!(parse(json!({"api": "PullLogs"})).is_err());
        assert!(parse(json!({"api": "PullLogs", "errorCode": "X"})).is_err());
        assert!(parse(json!({"api": "PullLogs", "status": 200})).is_err());
        assert!(parse(json!({"api": "PullLogs", "delayMs": 10})).is_ok());
        assert!(serde_json::from_value::<Fault>(json!({"api": "X", "bogus": 1})).is_err());
    }
}
