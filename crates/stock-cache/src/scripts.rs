//! The Lua scripts, embedded at build time. `redis::Script` sends EVALSHA and, when the
//! server answers NOSCRIPT (first use, or after a restart), loads the script and retries.

use std::sync::LazyLock;

use deadpool_redis::redis::Script;

pub(crate) static PRE_DEDUCT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/pre_deduct.lua")));
pub(crate) static CONFIRM: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/confirm.lua")));
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/release.lua")));
pub(crate) static LOAD_PRODUCT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/load_product.lua")));
