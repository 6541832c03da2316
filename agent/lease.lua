-- One host's lease of a fleet compartment: run atomically by Redis
-- (EVALSHA), once per host per refresh. Doorman's lease model, applied to
-- concurrency. A call costs the same at 4 hosts and at 1,000: it reads and
-- writes this host's entry, a few fleet totals and at most PRUNE expired
-- hosts, never every host.
--
-- KEYS[1]  hash: host -> "want holding grant expires_ms satisfied owed
--          fallback reserve_ms"
-- KEYS[2]  sorted set: host by when its entry next changes (ms): its lease
--          expiry, or the end of its silent reserve
-- KEYS[3]  hash: limit (set by `bulkhead set --fleet`), born,
--          learning_until, keys_until (when KEYS[1] and [2] expire: every
--          host gone for long enough takes them with it), and the totals
--          over the hosts of KEYS[1]: hosts, use (max(grant, holding)),
--          held, unmet (want beyond grant), owed, sat_want and sat_hosts
--          (see below)
-- ARGV     host, want, holding, previous grant, lease_ms, fleet_limit,
--          headroom, fallback ("split" or N), reserve_ms
-- Returns  { grant, fleet in use, hosts (silent ones included), learning
--            (0/1), fleet limit, owed (more is coming to this host as
--            others shrink), fallback (what this host falls to should it
--            lose Redis after this call) }
--
-- The invariant: the sum over hosts of max(grant, holding) never exceeds
-- the fleet limit, a silent host's reserve counting as its grant. A grant
-- stays in force until its host refreshes or its lease expires, so a
-- host's new grant is at most what the others' grants, holdings and
-- reserves leave (limit - use of the others). An expired host still
-- counted (not turned or pruned yet) only makes that smaller.
--
-- A silent host: its lease ended, but its agent may live on without Redis
-- (a partition) and use its fallback share for reserve_ms more (the
-- agent's fleet_fallback_ms and a refresh of margin for the clocks). So an
-- expired lease is not dropped but turned into a reserve of max(fallback,
-- holding), counted in use as a grant is, until expiry + reserve_ms; then
-- it is dropped. A fallback is at most the grant, so the turn never
-- raises use. A silent host counts as a satisfied host wanting what it
-- reserves, so that the level leaves it out. (Should the answer to a
-- host's last call before it is cut off be lost, the host falls to the
-- fallback of the call before, as it keeps that call's grant: the lease
-- model's one window, for grants as for fallbacks.)
--
-- Shares: max-min fairness by water-filling, done lazily. Each host
-- remembers whether its want was under the water level when it last
-- asked ("satisfied"); the level is what the limit leaves after the
-- satisfied hosts' wants, split equally among the others. A satisfied
-- host's target is its want, any other's the level (rounded down). Each
-- call re-decides only the caller, so after demand changes the shares
-- reach the max-min point over the hosts' next few refreshes.
-- The units that rounding leaves go one each to whoever asks first, and
-- only out of capacity that no other host's target still claims (owed).
-- Headroom, a little room to grow above want, comes only out of capacity
-- that nobody else wants at all (unmet).
--
-- A host holding more than its grant (the limit was lowered, or others
-- came) keeps its connections; its grant shrinks and it retires permits
-- as they end.
--
-- Redis restarted empty: the first agent to come back that was leased to
-- before (it sends a previous grant of at least 1) starts learning mode,
-- for one lease period, in which each host is granted no more than it
-- holds. A new deployment starts normally.
--
-- Everything is read and checked before the first write: Redis does not
-- roll a script back, so a failed call must leave nothing half-done. The
-- totals are checked against the host count of KEYS[1] and KEYS[2]; when
-- they disagree (keys expired, edited by hand) they are rebuilt from
-- KEYS[1] once, the only call that reads every host.

-- Written for Redis's Lua: globals are slow to reach there, so the ones
-- used are copied to locals first, and few tables are made per call.
local call, tonumber, match, floor = redis.call, tonumber, string.match, math.floor
local max, min, error_reply = math.max, math.min, redis.error_reply
local leases_key, expiry_key, meta_key = KEYS[1], KEYS[2], KEYS[3]
local PRUNE = 8           -- expired hosts dropped per call, at most
local LIMIT_MAX = 1000000 -- as fleet_limit and `bulkhead set --fleet`
local COUNT_MAX = 2147483647
local TOTALS = { 'hosts', 'use', 'held', 'unmet', 'owed', 'sat_want', 'sat_hosts' }
local RESERVE_MAX = 2 * 86400000  -- fleet_fallback_ms (a day) and a refresh

-- text as a number if it is written as a whole number from low to high:
-- digits only (tonumber would take "1e3", " 3" or "0x10").
local function whole(text, low, high)
  if not text or not match(text, '^%d+$') then return nil end
  local n = tonumber(text)
  if n < low or n > high then return nil end
  return n
end

-- ---- arguments -------------------------------------------------------------

if #KEYS ~= 3 or #ARGV ~= 9 then
  return error_reply('lease: wants 3 keys and 9 arguments, got ' .. #KEYS ..
                     ' and ' .. #ARGV)
end
local host = ARGV[1]
if host == '' then return error_reply('lease: argument 1 (host) is empty') end
local bad
local function argument(i, what, low, high)
  local n = whole(ARGV[i], low, high)
  if n == nil and not bad then
    bad = 'lease: argument ' .. i .. ' (' .. what .. ') is "' .. tostring(ARGV[i]) ..
          '", not a whole number from ' .. low .. ' to ' .. high
  end
  return n
end
local want = argument(2, 'want', 0, COUNT_MAX)
local holding = argument(3, 'holding', 0, COUNT_MAX)
local previous = argument(4, 'previous grant', 0, COUNT_MAX)
local lease = argument(5, 'lease_ms', 1, COUNT_MAX)
local file_limit = argument(6, 'fleet_limit', 1, LIMIT_MAX)
local headroom = argument(7, 'headroom', 0, COUNT_MAX)
local fixed_fallback = ARGV[8] == 'split' and -1 or argument(8, 'fallback', 0, COUNT_MAX)
local reserve = argument(9, 'reserve_ms', 0, RESERVE_MAX)
if bad then return error_reply(bad) end

-- ---- reads -------------------------------------------------------------------

local meta = call('HMGET', meta_key, 'limit', 'born', 'learning_until', 'keys_until',
                  unpack(TOTALS))
local raw_limit = meta[1]
local limit = tonumber(raw_limit or file_limit)
-- Bad data (a hand-edited limit): refuse to grant from it, and say what it
-- is; the agent keeps its last grant and says so.
if limit == nil or limit ~= floor(limit) or limit < 1 or limit > LIMIT_MAX then
  return error_reply('bad fleet limit in Redis: ' .. meta_key .. ' limit is "' ..
                     tostring(raw_limit) .. '", not a whole number from 1 to 1000000')
end

local time = call('TIME')
local now = tonumber(time[1]) * 1000 + floor(tonumber(time[2]) / 1000)
-- Expired: its lease ended a whole ms ago. `now` is rounded down, so a
-- lease that ends at `now` may still run on its host, which counted it
-- from before this call reached Redis.
local expired = call('ZRANGEBYSCORE', expiry_key, '-inf', '(' .. now, 'LIMIT', 0, PRUNE)
local entries = call('HMGET', leases_key, host, unpack(expired))
local counted = call('HLEN', leases_key)
local ranked = call('ZCARD', expiry_key)

local function parse(text)
  if not text then return nil end
  local w, h, g, e, s, o, f, r =
    match(text, '^(%d+) (%d+) (%d+) (%d+) ([01]) (%d+) (%d+) (%d+)$')
  if w == nil then return nil end
  return { want = tonumber(w), holding = tonumber(h), grant = tonumber(g),
           expires = tonumber(e), sat = tonumber(s), owed = tonumber(o),
           fallback = tonumber(f), reserve = tonumber(r) }
end

local function text_of(e)
  return e.want .. ' ' .. e.holding .. ' ' .. e.grant .. ' ' .. e.expires .. ' ' ..
         e.sat .. ' ' .. e.owed .. ' ' .. e.fallback .. ' ' .. e.reserve
end

-- An expired lease as its silent reserve, or nil when nothing is reserved
-- (no reserve asked, nothing to reserve, or the reserve is over too).
local function silent(e)
  local kept = max(e.fallback, e.holding)
  if e.reserve == 0 or kept == 0 or e.expires + e.reserve < now then return nil end
  return { want = kept, holding = e.holding, grant = kept, expires = e.expires + e.reserve,
           sat = 1, owed = 0, fallback = kept, reserve = 0 }
end

-- Adds (sign 1) or takes away (-1) one host's entry from the totals.
local function add(t, e, sign)
  t.hosts = t.hosts + sign
  t.use = t.use + sign * max(e.grant, e.holding)
  t.held = t.held + sign * e.holding
  t.unmet = t.unmet + sign * max(0, e.want - e.grant)
  t.owed = t.owed + sign * e.owed
  t.sat_want = t.sat_want + sign * e.sat * e.want
  t.sat_hosts = t.sat_hosts + sign * e.sat
end

-- The totals as stored, and whether they agree with the keys.
local totals, consistent = {}, counted == ranked
for i = 1, #TOTALS do
  local v = whole(meta[4 + i] or '0', 0, 1e15)
  totals[TOTALS[i]] = v
  if v == nil then consistent = false end
end
consistent = consistent and totals.hosts == counted
local mine = parse(entries[1])
if entries[1] and not mine then consistent = false end
local pruned = {}
for i = 1, #expired do
  pruned[i] = parse(entries[i + 1])
  if pruned[i] == nil then consistent = false end
end

-- ---- writes ------------------------------------------------------------------

-- Every host's entry read again: the totals from them, expired and bad
-- entries dropped, the expiry set remade.
local function rebuild()
  local all = call('HGETALL', leases_key)
  local sums, batch = {}, {}
  for i = 1, #TOTALS do sums[TOTALS[i]] = 0 end
  call('DEL', expiry_key)
  local function flush()
    if #batch > 0 then call('ZADD', expiry_key, unpack(batch)) end
    batch = {}
  end
  mine = nil
  for i = 1, #all, 2 do
    local e = parse(all[i + 1])
    if e and e.expires < now then
      e = silent(e)
      if e then call('HSET', leases_key, all[i], text_of(e)) end
    end
    if e == nil then
      call('HDEL', leases_key, all[i])
    else
      add(sums, e, 1)
      if all[i] == host then mine = e end
      batch[#batch + 1] = e.expires
      batch[#batch + 1] = all[i]
      if #batch >= 1000 then flush() end
    end
  end
  flush()
  return sums
end

if not consistent then
  totals = rebuild()
else
  for i = 1, #expired do
    if expired[i] ~= host then
      add(totals, pruned[i], -1)
      local kept = silent(pruned[i])
      if kept then
        add(totals, kept, 1)
        call('HSET', leases_key, expired[i], text_of(kept))
        call('ZADD', expiry_key, kept.expires, expired[i])
      else
        call('HDEL', leases_key, expired[i])
        call('ZREM', expiry_key, expired[i])
      end
    end
  end
end
-- The others: the totals without this host's last entry.
if mine then add(totals, mine, -1) end

local learning_until = tonumber(meta[3] or '0') or 0
if not meta[2] then
  learning_until = previous > 0 and now + lease or 0
  call('HSET', meta_key, 'born', now, 'learning_until', learning_until)
end
local learning = now < learning_until

-- The water level, and this host's target under it.
local unsatisfied = totals.hosts - totals.sat_hosts
local room = limit - totals.sat_want
local level = room > 0 and floor(room / (unsatisfied + 1)) or 0
local satisfied = want <= level
local target = satisfied and want or level

-- What the others leave: all of it, what their targets do not claim, and
-- what none of them wants.
local free = limit - totals.use
local grant = max(min(target, free),
                  min(want, target + 1, free - totals.owed),
                  min(want + headroom, free - totals.unmet))
if learning then grant = min(grant, holding) end
grant = max(0, grant)
local owed = max(0, target - grant)
-- What the host falls to if it loses Redis after this call: the split
-- counts the silent hosts too, as they are not gone. Never more than the
-- grant, so a silent host never reserves more than it was granted.
local share = fixed_fallback < 0 and floor(limit / (totals.hosts + 1)) or fixed_fallback
local fallback = min(grant, share)

local expires = now + lease
local entry = { want = want, holding = holding, grant = grant, expires = expires,
                sat = satisfied and 1 or 0, owed = owed, fallback = fallback,
                reserve = reserve }
add(totals, entry, 1)
call('HSET', leases_key, host, text_of(entry))
call('ZADD', expiry_key, expires, host)
-- The keys outlive every lease and reserve in them by a lease at least,
-- and a call sets their expiry only when that is near (once a lease
-- period, not once a call), or when they may be new: this host had no
-- entry (the keys may have been emptied and made again here), or they
-- were rebuilt. Never shortened: hosts may have longer leases and
-- reserves than this one.
local keys_until = whole(meta[4] or '0', 0, 1e15) or 0
local horizon = expires + reserve + lease
if not mine or not consistent or keys_until < horizon then
  keys_until = max(keys_until, horizon + lease)
  call('PEXPIREAT', leases_key, keys_until)
  call('PEXPIREAT', expiry_key, keys_until)
end
call('HSET', meta_key, 'hosts', totals.hosts, 'use', totals.use, 'held', totals.held,
     'unmet', totals.unmet, 'owed', totals.owed, 'sat_want', totals.sat_want,
     'sat_hosts', totals.sat_hosts, 'keys_until', keys_until)
return { grant, totals.held, totals.hosts, learning and 1 or 0, limit, owed, fallback }
