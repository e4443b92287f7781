//! `StockCache` and the Lua scripts against the real Redis (`SECKILL_TEST_REDIS_URL`, default
//! redis://127.0.0.1:16379; `bash deploy/local/stack.sh up` starts one). Every test has its
//! own key prefix ([`test_support::redis::TestRedis`]), so they run in parallel.

mod cluster;
mod concurrency;
mod confirm_release;
mod events;
mod helpers;
mod isolation;
mod lifecycle;
mod load;
mod pool;
mod pre_deduct;
mod reads;
mod replica_wait;
mod scripts;
mod sentinel;
mod stall;
mod tls;
