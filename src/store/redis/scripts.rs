//! The Lua scripts: one per conditional write, each run atomically by the server.
//!
//! Every script gets `KEYS[1]` = the item's hash and `KEYS[2]` = the table's index (a sorted
//! set of item keys, all scores 0), both under the table's hash tag, and `ARGV[1]` = the item
//! key, `ARGV[2]` = the call's token (stored in `lastOp` by the writes that move the counter),
//! `ARGV[3]` = the time for `updatedAt`; the operation's own arguments follow from `ARGV[4]`.
//! Every write to a lease but `create` has the nonce of the item it is meant for as
//! `ARGV[4]`, and its own arguments from `ARGV[5]`.
//!
//! Every script answers `{status, item, field}`: status 1 = applied (`item` is the hash as
//! written, or as it was for a delete), 0 = the condition is false (`item` is the hash as it
//! is, empty when absent), 2 = the item does not decode as the kind the script expects
//! (`field` names the first field at fault) and nothing was written. Every check runs before
//! the first write, and the index is written before the item, so no error of the server
//! (a wrong type) can leave a write half done.

use std::sync::OnceLock;

/// Helpers shared by every script: reading the item, and checking it field by field with the
/// same rules as the Rust decoder (`schema::decode`), so a malformed hash is refused, never
/// written over.
const PRELUDE: &str = r#"
local item, index, name, op, now = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]

local function read()
  local flat = redis.call('HGETALL', item)
  local h = {}
  for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
  return h, flat
end

-- A counter that HINCRBY can raise: a canonical decimal below 10^18.
local function counter(v)
  return v ~= nil and #v <= 18 and (v == '0' or string.match(v, '^[1-9]%d*$') ~= nil)
end

-- An incarnation or a nonce: a canonical decimal of a 64-bit unsigned number.
local function u64(v)
  if not (v == '0' or string.match(v, '^[1-9]%d*$')) then return false end
  return #v < 20 or (#v == 20 and v <= '18446744073709551615')
end

local function u32(v)
  if not (v == '0' or string.match(v, '^[1-9]%d*$')) then return false end
  return #v < 10 or (#v == 10 and v <= '4294967295')
end

-- UTF-8 text, as Rust's str::from_utf8 reads it: every sequence complete, none overlong, no
-- surrogate, nothing above U+10FFFF.
local function utf8(v)
  if not string.find(v, '[\128-\255]') then return true end
  local i, n = 1, #v
  while i <= n do
    local c = string.byte(v, i)
    -- The sequence's length, and the range of its second byte.
    local len, lo, hi = 1, 128, 191
    if c < 128 then len = 1
    elseif c >= 194 and c <= 223 then len = 2
    elseif c == 224 then len, lo = 3, 160
    elseif c == 237 then len, hi = 3, 159
    elseif c >= 225 and c <= 239 then len = 3
    elseif c == 240 then len, lo = 4, 144
    elseif c >= 241 and c <= 243 then len = 4
    elseif c == 244 then len, hi = 4, 143
    else return false end
    for j = i + 1, i + len - 1 do
      local b = string.byte(v, j)
      if b == nil or b < 128 or b > 191 then return false end
      if j == i + 1 and (b < lo or b > hi) then return false end
    end
    i = i + len
  end
  return true
end

-- A worker id or lease key: UTF-8, 1 to 1024 bytes, no control character, not reserved.
local function id(v)
  return #v > 0 and #v <= 1024 and not string.find(v, '%c')
    and not string.find(v, '\194[\128-\159]') and string.sub(v, 1, 11) ~= 'shardlease#'
    and utf8(v)
end

-- A load figure: text Rust's f64 parser reads (a sign, digits with at most one point and at
-- least one digit, an exponent) whose value is finite. tonumber alone is looser: it also reads
-- hex ("0x10", "0x1p4") and blanks around the number, which the Rust decoder refuses.
local function finite(v)
  local digits, exponent = string.match(v, '^[+-]?(%d*%.?%d*)(.*)$')
  if digits == nil or not string.find(digits, '%d') then return false end
  if exponent ~= '' and not string.match(exponent, '^[eE][+-]?%d+$') then return false end
  local n = tonumber(v)
  return n ~= nil and n > -math.huge and n < math.huge
end

-- True when no string of JSON text `v` holds a raw control character (JSON wants them
-- escaped; cjson takes them as they are, serde_json does not).
local function escaped(v)
  if not string.find(v, '[%z\1-\31]') then return true end
  local inside, backslash = false, false
  for i = 1, #v do
    local c = string.byte(v, i)
    if not inside then inside = c == 34
    elseif backslash then backslash = false
    elseif c == 92 then backslash = true
    elseif c == 34 then inside = false
    elseif c < 32 then return false end
  end
  return true
end

-- A JSON array of strings (parents, notices), as serde_json reads one: UTF-8 text, blanks
-- allowed around it, controls escaped; `check` tests each element.
local function strings(v, check)
  if not string.find(v, '^[ \t\n\r]*%[') or not utf8(v) or not escaped(v) then return nil end
  local ok, list = pcall(cjson.decode, v)
  if not ok or type(list) ~= 'table' then return nil end
  for i, s in pairs(list) do
    if type(i) ~= 'number' or type(s) ~= 'string' or not check(s) then return nil end
  end
  return list
end

local function any(s) return true end

-- A figure of a load report: finite() and above 0 (`positive`) or at least 0.
local function figure(v, positive)
  if not finite(v) then return false end
  local n = tonumber(v)
  if positive then return n > 0 end
  return n >= 0
end

-- Lease loads: lines `<lease key>\t<number>` joined by '\n', at least one, no key twice, each
-- key an id() and each number a figure of at least 0 (the Rust decoder's rules).
local function lease_loads(v)
  local seen = {}
  for line in string.gmatch(v .. '\n', '([^\n]*)\n') do
    local key, n = string.match(line, '^([^\t]*)\t(.*)$')
    if key == nil or seen[key] or not id(key) or not figure(n, false) then return false end
    seen[key] = true
  end
  return true
end

-- Lease keys joined by '\n', at least one, each an id(), none twice.
local function lease_keys(v)
  local seen = {}
  for key in string.gmatch(v .. '\n', '([^\n]*)\n') do
    if seen[key] or not id(key) then return false end
    seen[key] = true
  end
  return true
end

local function bad_lease(h)
  if h.leaseKey ~= name then return 'leaseKey' end
  if h.lastOp ~= nil and not utf8(h.lastOp) then return 'lastOp' end
  if not counter(h.leaseCounter) then return 'leaseCounter' end
  if not counter(h.leaseTenure) then return 'leaseTenure' end
  local s = h.ownerSwitchesSinceCheckpoint
  if s ~= nil and not counter(s) then return 'ownerSwitchesSinceCheckpoint' end
  if h.leaseOwner ~= nil and not id(h.leaseOwner) then return 'leaseOwner' end
  if h.ownerIncarnation ~= nil and not u64(h.ownerIncarnation) then return 'ownerIncarnation' end
  local to = h.handoffTo
  if to ~= nil and to ~= 'shardlease#retire' and not id(to) then return 'handoffTo' end
  if h.leaseLoad ~= nil and not finite(h.leaseLoad) then return 'leaseLoad' end
  if h.checkpoint ~= nil and not utf8(h.checkpoint) then return 'checkpoint' end
  local ct, cs = h.checkpointTenure, h.checkpointSeq
  if ct ~= nil and not counter(ct) then return 'checkpointTenure' end
  if cs ~= nil and not counter(cs) then return 'checkpointSeq' end
  if ct ~= nil and cs == nil then return 'checkpointSeq' end
  if cs ~= nil and ct == nil then return 'checkpointTenure' end
  if h.leaseNonce ~= nil and not u64(h.leaseNonce) then return 'leaseNonce' end
  if h.parentLeaseKeys ~= nil and not strings(h.parentLeaseKeys, id) then
    return 'parentLeaseKeys'
  end
  return nil
end

local function bad_member(h)
  if h.leaseKey ~= name then return 'leaseKey' end
  if h.lastOp ~= nil and not utf8(h.lastOp) then return 'lastOp' end
  if not counter(h.heartbeat) then return 'heartbeat' end
  local inc = h.workerIncarnation
  if inc ~= nil and not u64(inc) then return 'workerIncarnation' end
  if h.workerLoad ~= nil and not finite(h.workerLoad) then return 'workerLoad' end
  if h.workerWeight ~= nil and not figure(h.workerWeight, true) then return 'workerWeight' end
  if h.leaseLoads ~= nil and not lease_loads(h.leaseLoads) then return 'leaseLoads' end
  if h.haltedLeases ~= nil and not lease_keys(h.haltedLeases) then return 'haltedLeases' end
  if h.workerCapacity ~= nil and not u32(h.workerCapacity) then return 'workerCapacity' end
  if h.notices ~= nil and not strings(h.notices, any) then return 'notices' end
  local p = h.workerProtocol
  if p ~= nil and p ~= 'sessions' then return 'workerProtocol' end
  return nil
end

-- The item as the script expects it: (h, flat), or (nil, the answer to return at once).
local function expect(bad)
  local h, flat = read()
  if #flat == 0 then return nil, {0, flat, ''} end
  local field = bad(h)
  if field then return nil, {2, flat, field} end
  return h, flat
end

-- A lease, and the item the write is meant for: its nonce is ARGV[4] ('0': an item stored
-- without one). A later item of the key is a lost race, as a changed counter is.
local function lease()
  local h, flat = expect(bad_lease)
  if h and (h.leaseNonce or '0') ~= ARGV[4] then return nil, {0, flat, ''} end
  return h, flat
end
local function member() return expect(bad_member) end

local function done()
  return {1, redis.call('HGETALL', item), ''}
end

local function held(h, owner, tenure)
  return h.leaseOwner == owner and h.leaseTenure == tenure
end

-- A new owner in a new tenure, its process to take it next (handoff, give).
local function hand_over(to)
  redis.call('HINCRBY', item, 'leaseCounter', 1)
  redis.call('HINCRBY', item, 'leaseTenure', 1)
  redis.call('HINCRBY', item, 'ownerSwitchesSinceCheckpoint', 1)
  redis.call('HSET', item, 'leaseOwner', to, 'lastOp', op, 'updatedAt', now)
  redis.call('HDEL', item, 'handoffTo', 'ownerIncarnation')
end

-- The notices of a record checked by bad_member, as a set.
local function notice_set(h)
  local set = {}
  if h.notices ~= nil then
    for _, n in ipairs(cjson.decode(h.notices)) do set[n] = true end
  end
  return set
end

-- Writes the load report of ARGV[i..i+3]: the weight (empty: no report, the figures stay as
-- they are), the utilisation, the lease loads and the halted leases (each empty: removed).
local function store_report(i)
  if ARGV[i] == '' then return end
  redis.call('HSET', item, 'workerWeight', ARGV[i])
  if ARGV[i + 1] ~= '' then redis.call('HSET', item, 'workerLoad', ARGV[i + 1])
  else redis.call('HDEL', item, 'workerLoad') end
  if ARGV[i + 2] ~= '' then redis.call('HSET', item, 'leaseLoads', ARGV[i + 2])
  else redis.call('HDEL', item, 'leaseLoads') end
  if ARGV[i + 3] ~= '' then redis.call('HSET', item, 'haltedLeases', ARGV[i + 3])
  else redis.call('HDEL', item, 'haltedLeases') end
end

local function store_notices(set)
  local list = {}
  for n in pairs(set) do list[#list + 1] = n end
  if #list == 0 then
    redis.call('HDEL', item, 'notices')
  else
    table.sort(list)
    redis.call('HSET', item, 'notices', cjson.encode(list))
  end
end
"#;

/// `create`: the item is absent. `ARGV[4..]`: the whole hash, field and value in turn.
const CREATE: &str = r#"
local h, flat = read()
if #flat > 0 then return {0, flat, ''} end
redis.call('ZADD', index, 0, name)
redis.call('HSET', item, unpack(ARGV, 4))
return done()
"#;

/// `renew`: held by `ARGV[5]` in tenure `ARGV[6]`. `ARGV[7]`: the load figure, or empty.
const RENEW: &str = r#"
local h, flat = lease()
if not h then return flat end
if not held(h, ARGV[5], ARGV[6]) then return {0, flat, ''} end
redis.call('HINCRBY', item, 'leaseCounter', 1)
if ARGV[7] ~= '' then redis.call('HSET', item, 'leaseLoad', ARGV[7]) end
redis.call('HSET', item, 'lastOp', op, 'updatedAt', now)
return done()
"#;

/// `take`: the counter is `ARGV[5]`. `ARGV[6]`: the taker, `ARGV[7]`: its incarnation.
const TAKE: &str = r#"
local h, flat = lease()
if not h then return flat end
if h.leaseCounter ~= ARGV[5] then return {0, flat, ''} end
redis.call('HINCRBY', item, 'leaseCounter', 1)
redis.call('HINCRBY', item, 'leaseTenure', 1)
redis.call('HINCRBY', item, 'ownerSwitchesSinceCheckpoint', 1)
redis.call('HSET', item, 'leaseOwner', ARGV[6], 'ownerIncarnation', ARGV[7],
  'lastOp', op, 'updatedAt', now)
redis.call('HDEL', item, 'handoffTo')
return done()
"#;

/// `request_handoff`: held by `ARGV[5]` in tenure `ARGV[6]`, no handoff to another than `ARGV[7]`
/// pending. Leaves `lastOp` alone (see the DynamoDB schema's `UPDATE_REQUEST_HANDOFF`).
const REQUEST_HANDOFF: &str = r#"
local h, flat = lease()
if not h then return flat end
local pending = h.handoffTo
if not held(h, ARGV[5], ARGV[6]) or (pending ~= nil and pending ~= ARGV[7]) then
  return {0, flat, ''}
end
redis.call('HSET', item, 'handoffTo', ARGV[7], 'updatedAt', now)
return done()
"#;

/// `complete_handoff`: held by `ARGV[5]` in tenure `ARGV[6]`, the handoff going to `ARGV[7]`.
const COMPLETE_HANDOFF: &str = r#"
local h, flat = lease()
if not h then return flat end
if not held(h, ARGV[5], ARGV[6]) or h.handoffTo ~= ARGV[7] then return {0, flat, ''} end
hand_over(ARGV[7])
return done()
"#;

/// `give`: the counter is `ARGV[5]`; the lease goes to `ARGV[6]`.
const GIVE: &str = r#"
local h, flat = lease()
if not h then return flat end
if h.leaseCounter ~= ARGV[5] then return {0, flat, ''} end
hand_over(ARGV[6])
return done()
"#;

/// `release`: held by `ARGV[5]` in tenure `ARGV[6]`.
const RELEASE: &str = r#"
local h, flat = lease()
if not h then return flat end
if not held(h, ARGV[5], ARGV[6]) then return {0, flat, ''} end
redis.call('HINCRBY', item, 'leaseCounter', 1)
redis.call('HSET', item, 'lastOp', op, 'updatedAt', now)
redis.call('HDEL', item, 'leaseOwner', 'ownerIncarnation', 'handoffTo')
return done()
"#;

/// `checkpoint`: held by `ARGV[5]` in tenure `ARGV[6]`, and no checkpoint of that tenure numbered
/// `ARGV[7]` or higher stored; `ARGV[8]` is the checkpoint.
const CHECKPOINT: &str = r#"
local h, flat = lease()
if not h then return flat end
if not held(h, ARGV[5], ARGV[6]) then return {0, flat, ''} end
if h.checkpointTenure == ARGV[6] and tonumber(h.checkpointSeq) >= tonumber(ARGV[7]) then
  return {0, flat, ''}
end
redis.call('HINCRBY', item, 'leaseCounter', 1)
redis.call('HSET', item, 'checkpoint', ARGV[8], 'checkpointTenure', ARGV[6],
  'checkpointSeq', ARGV[7], 'ownerSwitchesSinceCheckpoint', '0', 'lastOp', op, 'updatedAt', now)
return done()
"#;

/// `delete`: counter `ARGV[5]` and tenure `ARGV[6]`. Answers the item as it was.
const DELETE: &str = r#"
local h, flat = lease()
if not h then return flat end
if h.leaseCounter ~= ARGV[5] or h.leaseTenure ~= ARGV[6] then return {0, flat, ''} end
redis.call('ZREM', index, name)
redis.call('DEL', item)
return {1, flat, ''}
"#;

/// `heartbeat`: the item is absent or a membership record. `ARGV[4]`: the worker, `ARGV[5]`: its
/// incarnation, `ARGV[6]`: the capacity or empty, `ARGV[7..10]`: the load report (`store_report`).
const HEARTBEAT: &str = r#"
local h, flat = read()
if #flat == 0 then
  redis.call('ZADD', index, 0, name)
  redis.call('HSET', item, 'leaseKey', name)
else
  local field = bad_member(h)
  if field then return {2, flat, field} end
end
redis.call('HINCRBY', item, 'heartbeat', 1)
redis.call('HSET', item, 'workerId', ARGV[4], 'workerIncarnation', ARGV[5],
  'lastOp', op, 'updatedAt', now)
redis.call('HDEL', item, 'workerProtocol')
if ARGV[6] ~= '' then redis.call('HSET', item, 'workerCapacity', ARGV[6])
else redis.call('HDEL', item, 'workerCapacity') end
store_report(7)
return done()
"#;

/// `remove_member`: a membership record, at heartbeat `ARGV[4]` unless it is empty.
const REMOVE_MEMBER: &str = r#"
local h, flat = member()
if not h then return flat end
if ARGV[4] ~= '' and h.heartbeat ~= ARGV[4] then return {0, flat, ''} end
redis.call('ZREM', index, name)
redis.call('DEL', item)
return {1, flat, ''}
"#;

/// `open_session`: `ARGV[7]` = 'new': the item is absent; 'replace': the record's incarnation
/// is `ARGV[8]` (empty: it has none) and its heartbeat `ARGV[9]`. The fresh record: worker
/// `ARGV[4]`, incarnation `ARGV[5]`, capacity `ARGV[6]` (or none), heartbeat `ARGV[10]`; no notices
/// and no load report (the old hash is deleted).
const OPEN_SESSION: &str = r#"
local h, flat = read()
if #flat == 0 then
  if ARGV[7] ~= 'new' then return {0, flat, ''} end
else
  local field = bad_member(h)
  if field then return {2, flat, field} end
  if ARGV[7] ~= 'replace' then return {0, flat, ''} end
  local old = h.workerIncarnation or ''
  if old ~= ARGV[8] or h.heartbeat ~= ARGV[9] then return {0, flat, ''} end
end
redis.call('ZADD', index, 0, name)
redis.call('DEL', item)
redis.call('HSET', item, 'leaseKey', name, 'workerId', ARGV[4], 'workerIncarnation', ARGV[5],
  'heartbeat', ARGV[10], 'workerProtocol', 'sessions', 'lastOp', op, 'updatedAt', now)
if ARGV[6] ~= '' then redis.call('HSET', item, 'workerCapacity', ARGV[6]) end
return done()
"#;

/// `beat`: the record is incarnation `ARGV[4]`'s. `ARGV[5]`: the capacity or empty; `ARGV[6..9]`:
/// the load report (`store_report`); `ARGV[10..]`: the notices seen.
const BEAT: &str = r#"
local h, flat = member()
if not h then return flat end
if h.workerIncarnation ~= ARGV[4] then return {0, flat, ''} end
local set = notice_set(h)
local seen = 0
for i = 10, #ARGV do
  if set[ARGV[i]] then set[ARGV[i]] = nil; seen = seen + 1 end
end
redis.call('HINCRBY', item, 'heartbeat', 1)
redis.call('HSET', item, 'lastOp', op, 'updatedAt', now)
if ARGV[5] ~= '' then redis.call('HSET', item, 'workerCapacity', ARGV[5])
else redis.call('HDEL', item, 'workerCapacity') end
store_report(6)
if seen > 0 then store_notices(set) end
return done()
"#;

/// `end_session`: the record is incarnation `ARGV[4]`'s at heartbeat `ARGV[5]`.
const END_SESSION: &str = r#"
local h, flat = member()
if not h then return flat end
if h.workerIncarnation ~= ARGV[4] or h.heartbeat ~= ARGV[5] then return {0, flat, ''} end
redis.call('ZREM', index, name)
redis.call('DEL', item)
return {1, flat, ''}
"#;

/// `notify`: the record is incarnation `ARGV[4]`'s; `ARGV[5..]` are added to its notices. Leaves
/// `lastOp` alone: a notice must not hide the token of an `open_session` whose answer was lost.
const NOTIFY: &str = r#"
local h, flat = member()
if not h then return flat end
if h.workerIncarnation ~= ARGV[4] then return {0, flat, ''} end
if #ARGV < 5 then return {1, flat, ''} end
local set = notice_set(h)
for i = 5, #ARGV do set[ARGV[i]] = true end
store_notices(set)
redis.call('HSET', item, 'updatedAt', now)
return done()
"#;

/// One conditional write: its name (for errors and logs) and its Lua source, with the SHA1
/// that `EVALSHA` names it by, computed on first use.
#[derive(Debug)]
pub(super) struct Script {
    /// The store operation.
    pub name: &'static str,
    /// The operation's own part of the script, after [`PRELUDE`].
    body: &'static str,
    compiled: OnceLock<(String, String)>,
}

impl Script {
    const fn new(name: &'static str, body: &'static str) -> Self {
        Self {
            name,
            body,
            compiled: OnceLock::new(),
        }
    }

    fn compiled(&self) -> &(String, String) {
        self.compiled.get_or_init(|| {
            let source = format!("{PRELUDE}{}", self.body);
            let sha = redis::Script::new(&source).get_hash().to_owned();
            (source, sha)
        })
    }

    /// The whole source the server runs.
    pub fn source(&self) -> &str {
        &self.compiled().0
    }

    /// Its SHA1, in hex.
    pub fn sha(&self) -> &str {
        &self.compiled().1
    }
}

macro_rules! scripts {
    ($($name:ident = $op:literal, $body:ident;)*) => {
        $(
            #[doc = concat!("The `", $op, "` script.")]
            pub(super) static $name: Script = Script::new($op, $body);
        )*
        /// Every script, loaded at connect.
        pub(super) static ALL: &[&Script] = &[$(&$name),*];
    };
}

scripts! {
    SCRIPT_CREATE = "create", CREATE;
    SCRIPT_RENEW = "renew", RENEW;
    SCRIPT_TAKE = "take", TAKE;
    SCRIPT_REQUEST_HANDOFF = "request_handoff", REQUEST_HANDOFF;
    SCRIPT_COMPLETE_HANDOFF = "complete_handoff", COMPLETE_HANDOFF;
    SCRIPT_GIVE = "give", GIVE;
    SCRIPT_RELEASE = "release", RELEASE;
    SCRIPT_CHECKPOINT = "checkpoint", CHECKPOINT;
    SCRIPT_DELETE = "delete", DELETE;
    SCRIPT_HEARTBEAT = "heartbeat", HEARTBEAT;
    SCRIPT_REMOVE_MEMBER = "remove_member", REMOVE_MEMBER;
    SCRIPT_OPEN_SESSION = "open_session", OPEN_SESSION;
    SCRIPT_BEAT = "beat", BEAT;
    SCRIPT_END_SESSION = "end_session", END_SESSION;
    SCRIPT_NOTIFY = "notify", NOTIFY;
}
