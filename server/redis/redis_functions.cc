#include "server/redis/redis_functions.h"

#include "server/store.h"

static_assert(osprey::server::kRowHistory == 4, "osprey_apply shifts 4 u64 versions (32 bytes)");

namespace osprey::server::redis_store {

const std::string& FunctionLibrary() {
  static const std::string* lib = new std::string(R"LUA(#!lua name=osprey_store_v1
local function fenced(fence, rank, inc)
  local cur = redis.call('HGET', fence, rank)
  if cur and tonumber(cur) > tonumber(inc) then
    return 'FENCED server rank ' .. rank .. ' incarnation ' .. inc ..
           ' was replaced by incarnation ' .. cur .. ' (' .. fence .. ')'
  end
  return nil
end

redis.register_function('osprey_claim', function(keys, args)
  local err = fenced(keys[1], args[1], args[2])
  if err then return redis.error_reply(err) end
  redis.call('HSET', keys[1], args[1], args[2])
  return 'OK'
end)

redis.register_function('osprey_put', function(keys, args)
  local err = fenced(keys[1], args[1], args[2])
  if err then return redis.error_reply(err) end
  return redis.call('HSET', keys[2], unpack(args, 3))
end)

-- A scale step's moved rows (redis_store_reshard.cc): deleted from the old owner's bucket once
-- their new owner holds them. Returns how many fields were deleted.
redis.register_function('osprey_del', function(keys, args)
  local err = fenced(keys[1], args[1], args[2])
  if err then return redis.error_reply(err) end
  return redis.call('HDEL', keys[2], unpack(args, 3))
end)

-- A scale step on one Redis node (redis_store_reown.cc): the rows of fields args[3..] leave the
-- old owner's bucket (keys[1] its fence, keys[2] its rows) for the new owner's (keys[3]) in
-- place, under the old owner's fence. Returns how many moved (a field not there is skipped).
redis.register_function('osprey_move', function(keys, args)
  local err = fenced(keys[1], args[1], args[2])
  if err then return redis.error_reply(err) end
  local vals = redis.call('HMGET', keys[2], unpack(args, 3))
  local kv = {}
  for i = 3, #args do
    local v = vals[i - 2]
    if v then
      kv[#kv + 1] = args[i]
      kv[#kv + 1] = v
    end
  end
  if #kv == 0 then return 0 end
  redis.call('HSET', keys[3], unpack(kv))
  redis.call('HDEL', keys[2], unpack(args, 3))
  return #kv / 2
end)

-- Its Redis Cluster form (the two buckets are in different slots): the blobs are read under the
-- old owner's fence, written to the new owner's bucket by the old owner, then deleted (osprey_del).
redis.register_function('osprey_take', function(keys, args)
  local err = fenced(keys[1], args[1], args[2])
  if err then return redis.error_reply(err) end
  return redis.call('HMGET', keys[2], unpack(args, 3))
end)

-- merge: redis (redis_merge.cc): one sgd / adagrad step per row, in double, stored as floats.
-- A row blob is its floats then 32 bytes of update versions (4 u64, newest first).
redis.register_function('osprey_apply', function(keys, args)
  local err = fenced(keys[1], args[1], args[2])
  if err then return redis.error_reply(err) end
  local adagrad = args[3] == 'adagrad'
  local lr = struct.unpack('<f', args[4])
  local eps = struct.unpack('<f', args[5])
  local dim = tonumber(args[6])
  local nf = dim + tonumber(args[7])
  local ver = args[8]
  local ffmt = '<' .. string.rep('f', nf)
  local gfmt = '<' .. string.rep('f', dim)
  local created = 0
  for i = 9, #args, 2 do
    local b = args[i + 1]
    local cur = redis.call('HGET', keys[2], args[i])
    local r, hist
    if cur then
      r = {struct.unpack(ffmt, cur)}
      hist = string.sub(cur, nf * 4 + 1)
    else
      r = {struct.unpack(ffmt, b, dim * 4 + 1)}
      hist = string.rep('\0', 32)
      created = created + 1
    end
    local g = {struct.unpack(gfmt, b)}
    if adagrad then
      for j = 1, dim do
        local a = r[dim + j] + g[j] * g[j]
        r[dim + j] = a
        r[j] = r[j] - lr * g[j] / (math.sqrt(a) + eps)
      end
    else
      for j = 1, dim do r[j] = r[j] - lr * g[j] end
    end
    if #ver == 8 then hist = ver .. string.sub(hist, 1, 24) end
    redis.call('HSET', keys[2], args[i], struct.pack(ffmt, unpack(r, 1, nf)) .. hist)
  end
  return created
end)

-- Push marks (push_marks.cc): keys {P}:incarnation:r<r>, {P}:pushes:r<r>; args: the server's
-- incarnation, the write's sequence number, the pushes applied, the ids kept per field (K), then
-- per (table, worker): field t<t>:w<w>, the worker's incarnation, the ids applied ("id id ...").
-- A field holds "<incarnation> <evicted> <id> ..." (the last K ids applied; every id <= evicted
-- was applied or answered). A sequence number at or below the stored one is a retried write
-- already applied (the counter is not added twice).
redis.register_function('osprey_marks', function(keys, args)
  local cur = redis.call('GET', keys[1])
  if cur and tonumber(cur) > tonumber(args[1]) then
    return redis.error_reply('FENCED server incarnation ' .. args[1] ..
                             ' was replaced by incarnation ' .. cur .. ' (' .. keys[1] .. ')')
  end
  local done = redis.call('HGET', keys[2], 'seq')
  if done and tonumber(done) >= tonumber(args[2]) then return 0 end
  redis.call('HSET', keys[2], 'seq', args[2])
  redis.call('HINCRBY', keys[2], 'applied', args[3])
  local k = tonumber(args[4])
  for i = 5, #args, 3 do
    local old = redis.call('HGET', keys[2], args[i])
    local evicted, list = 0, {}
    if old then
      local parts = {}
      for w in string.gmatch(old, '%d+') do parts[#parts + 1] = w end
      if parts[1] == args[i + 1] then
        evicted = tonumber(parts[2])
        for j = 3, #parts do list[#list + 1] = parts[j] end
      end
    end
    for w in string.gmatch(args[i + 2], '%d+') do list[#list + 1] = w end
    local drop = #list - k
    if drop > 0 then
      for j = 1, drop do evicted = math.max(evicted, tonumber(list[j])) end
      list = {unpack(list, drop + 1)}
    end
    redis.call('HSET', keys[2], args[i], args[i + 1] .. ' ' .. string.format('%.0f', evicted) ..
               ' ' .. table.concat(list, ' '))
  end
  return 1
end)

redis.register_function('osprey_set', function(keys, args)
  local err = fenced(keys[1], args[1], args[2])
  if err then return redis.error_reply(err) end
  redis.call('SET', keys[2], args[3])
  return 0
end)
)LUA");
  return *lib;
}

}  // namespace osprey::server::redis_store
