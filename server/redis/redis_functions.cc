#include "server/redis/redis_functions.h"

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
