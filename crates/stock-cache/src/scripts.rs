//! The Lua scripts, embedded at build time. `redis::Script` sends EVALSHA and, when the
//! server answers NOSCRIPT (first use, or after a restart), loads the script and retries;
//! [`invoke`] sends the call again should the script cache be emptied once more meanwhile.

use std::sync::LazyLock;

use deadpool_redis::redis::{
    ErrorKind, FromRedisValue, RedisResult, Script, ScriptInvocation, ServerErrorKind,
    aio::ConnectionLike,
};

pub(crate) static PRE_DEDUCT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/pre_deduct.lua")));
// confirm.lua, release.lua and return_units.lua all give units back: one function, prepended
// to each.
pub(crate) static CONFIRM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../../../lua/lib/give_back.lua"),
        include_str!("../../../lua/confirm.lua")
    ))
});
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../../../lua/lib/give_back.lua"),
        include_str!("../../../lua/release.lua")
    ))
});
pub(crate) static RETURN_UNITS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../../../lua/lib/give_back.lua"),
        include_str!("../../../lua/return_units.lua")
    ))
});
pub(crate) static MARK_CONFIRMED: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/mark_confirmed.lua")));
pub(crate) static MARK_PAID: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/mark_paid.lua")));
pub(crate) static LOAD_PRODUCT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/load_product.lua")));
pub(crate) static RESTOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/restock.lua")));
pub(crate) static FORGET_SALE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/forget_sale.lua")));

/// `Script` retries only once after loading; a script cache emptied again between its
/// SCRIPT LOAD and that retry (a flush, restart or fail-over in the window) would fail the
/// call. NOSCRIPT means the script did not run, so sending the call again is always safe.
const ATTEMPTS: u32 = 3;

pub(crate) async fn invoke<T: FromRedisValue>(
    invocation: &ScriptInvocation<'_>,
    conn: &mut impl ConnectionLike,
) -> RedisResult<T> {
    let mut attempt = 1;
    loop {
        match invocation.invoke_async(conn).await {
            Err(e)
                if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
                    && attempt < ATTEMPTS =>
            {
                attempt += 1;
            }
            answer => return answer,
        }
    }
}
