//! Against the real broker (name server at `SECKILL_TEST_NAMESRV`, default 127.0.0.1:19876;
//! `bash deploy/local/stack.sh up` starts one). Every test has its own topic and groups, so
//! they run in parallel. Waits are bounded; timings go to stderr (`--nocapture` shows them).

mod backlog;
mod batcher;
mod deadline;
mod helpers;
mod lifecycle;
mod pace;
mod publish;
mod retry;
mod topic;
mod transactional;
