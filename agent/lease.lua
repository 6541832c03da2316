-- One host's lease of a fleet compartment: run atomically by Redis
-- (EVALSHA), once per host per refresh. Doorman's lease model, applied to
-- concurrency.
--
-- KEYS[1]  hash: host -> "want holding grant expires_ms"
-- KEYS[2]  hash: limit (set by `bulkhead set --fleet`), born, learning_until
-- ARGV     host, want, holding, previous grant, lease_ms, fleet_limit
-- Returns  { grant, fleet in use, live hosts, learning (0/1), fleet limit }
--
-- The invariant: the sum over hosts of max(grant, holding) never exceeds
-- the fleet limit. Grants handed out earlier stay in force until their
-- host refreshes or its lease expires, so a host's new grant is at most
-- what the others' grants and holdings leave. Its target is its max-min
-- fair share: water-filling over everyone's want, so a host wanting less
-- than the level keeps all it wants and the rest is split among the others.
-- A host holding more than its grant (the limit was lowered) keeps its
-- connections; its grant shrinks and it retires permits as they end.
--
-- Redis restarted empty: the first agent to come back with a grant from
-- before starts learning mode, for one lease period, in which each host is
-- granted no more than it holds. Agents that were granted nothing before
-- (a new deployment) start it normally.

local hosts_key, meta_key = KEYS[1], KEYS[2]
local host = ARGV[1]
local want, holding = tonumber(ARGV[2]), tonumber(ARGV[3])
local previous, lease = tonumber(ARGV[4]), tonumber(ARGV[5])
local raw_limit = redis.call('HGET', meta_key, 'limit')
local limit = tonumber(raw_limit or ARGV[6])
-- Bad data (a hand-edited limit): refuse to grant from it, and say what it
-- is; the agent keeps its last grant and says so. The range is the rules
-- file's and `bulkhead set --fleet`'s.
if limit == nil or limit ~= math.floor(limit) or limit < 1 or limit > 1000000 then
  return redis.error_reply('bad fleet limit in Redis: ' .. meta_key .. ' limit is "' ..
                           tostring(raw_limit) .. '", not a whole number from 1 to 1000000')
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

if redis.call('HEXISTS', meta_key, 'born') == 0 then
  redis.call('HSET', meta_key, 'born', now)
  if previous > 0 then
    redis.call('HSET', meta_key, 'learning_until', now + lease)
  end
end
local learning = now < tonumber(redis.call('HGET', meta_key, 'learning_until') or '0')

-- Everyone else still live: their wants, and what they hold or may use.
local others_use, in_use = 0, holding
local hosts = { { name = host, want = want } }
local entries = redis.call('HGETALL', hosts_key)
for i = 1, #entries, 2 do
  local name = entries[i]
  local w, h, g, e = string.match(entries[i + 1], '^(%d+) (%d+) (%d+) (%d+)$')
  if name ~= host then
    if w == nil or tonumber(e) <= now then
      redis.call('HDEL', hosts_key, name)
    else
      others_use = others_use + math.max(tonumber(g), tonumber(h))
      in_use = in_use + tonumber(h)
      hosts[#hosts + 1] = { name = name, want = tonumber(w) }
    end
  end
end

-- The water level: hosts wanting less than an equal split of what is left
-- get all they want; the rest share the remainder equally, and the units
-- an equal split leaves over go one each to them in name order.
table.sort(hosts, function(a, b)
  if a.want ~= b.want then return a.want < b.want end
  return a.name < b.name
end)
local left, level, extra = limit, nil, 0
for i = 1, #hosts do
  local sharing = #hosts - i + 1
  local fair = math.floor(left / sharing)
  if hosts[i].want > fair then
    level = fair
    local unsatisfied = {}
    for j = i, #hosts do unsatisfied[#unsatisfied + 1] = hosts[j].name end
    table.sort(unsatisfied)
    for j = 1, left - fair * sharing do
      if unsatisfied[j] == host then extra = 1 end
    end
    break
  end
  left = left - hosts[i].want
end
if level == nil then level = want end

local grant = math.min(want, level + extra)
if learning then grant = math.min(grant, holding) end
grant = math.max(0, math.min(grant, limit - others_use))

redis.call('HSET', hosts_key, host,
           want .. ' ' .. holding .. ' ' .. grant .. ' ' .. (now + lease))
redis.call('PEXPIRE', hosts_key, 2 * lease)
return { grant, in_use, #hosts, learning and 1 or 0, limit }
