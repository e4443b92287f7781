//! `mysql.ssl_mode`: the store over TLS to the local MariaDB, whose certificate is signed by
//! the run folder's CA, as the user `seckill_tls`, which the server admits only over TLS with
//! a client certificate of that CA (see `test_support::tls`).

use order_store::{Db, MysqlSettings, SslMode, WriteSummary};
use test_support::mysql::TestDb;
use test_support::tls;

use crate::helpers::{order, put_product};

/// The test database, as the TLS-only user, with `ssl_mode` and the stack's CA and client
/// certificate.
fn over_tls(test_db: &TestDb, ssl_mode: SslMode) -> MysqlSettings {
    MysqlSettings {
        url: tls::mysql_url_as_tls_user(test_db.url()).into(),
        pool_size: 2,
        ssl_mode,
        ssl_ca_file: Some(tls::file("ca.pem")),
        ssl_cert_file: Some(tls::file("client.pem")),
        ssl_key_file: Some(tls::file("client.key")),
    }
}

#[tokio::test]
async fn verifying_the_servers_identity_the_store_migrates_and_writes_orders_over_tls() {
    let test_db = TestDb::create_unmigrated().await;
    let endpoint = over_tls(&test_db, SslMode::VerifyIdentity)
        .endpoint()
        .unwrap();
    order_store::migrate(&endpoint).await.unwrap();
    let db = Db::connect(&endpoint, 2).unwrap();
    put_product(&db, 1, 10).await;
    let batch = vec![order(1, 100, 1), order(1, 101, 2)];

    let first = db.write_orders(&batch).await.unwrap();
    let again = db.write_orders(&batch).await.unwrap();

    assert_eq!(
        first,
        WriteSummary {
            inserted: 2,
            duplicates: 0,
            stock_left: vec![(domain::ProductId(1), 7)],
        }
    );
    assert_eq!((again.inserted, again.duplicates), (0, 2), "{again:?}");
    assert_eq!(db.stock(domain::ProductId(1)).await.unwrap(), Some(7));
}

#[tokio::test]
async fn every_verifying_mode_connects_with_the_servers_ca() {
    let test_db = TestDb::create().await;
    for mode in [
        SslMode::Required,
        SslMode::VerifyCa,
        SslMode::VerifyIdentity,
    ] {
        let db = Db::connect(over_tls(&test_db, mode).endpoint().unwrap(), 1).unwrap();
        db.ping().await.unwrap_or_else(|e| panic!("{mode:?}: {e}"));
    }
}

#[tokio::test]
async fn the_tls_only_user_is_refused_without_tls() {
    let test_db = TestDb::create().await;
    let plain = MysqlSettings {
        ssl_mode: SslMode::Disabled,
        ssl_ca_file: None,
        ssl_cert_file: None,
        ssl_key_file: None,
        ..over_tls(&test_db, SslMode::Disabled)
    };
    let db = Db::connect(plain.endpoint().unwrap(), 1).unwrap();
    assert!(
        db.ping().await.is_err(),
        "seckill_tls must not get in over plain TCP"
    );
}

#[tokio::test]
async fn a_server_certificate_of_a_ca_the_client_does_not_trust_is_refused() {
    let test_db = TestDb::create().await;
    let system_roots = MysqlSettings {
        ssl_ca_file: None,
        ..over_tls(&test_db, SslMode::VerifyCa)
    };
    let db = Db::connect(system_roots.endpoint().unwrap(), 1).unwrap();
    assert!(
        db.ping().await.is_err(),
        "the server's certificate must not be trusted"
    );
}
