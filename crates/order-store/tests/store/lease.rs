use std::time::Duration;

use test_support::mysql::TestDb;

#[tokio::test]
async fn the_lease_admits_one_holder_until_it_expires() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    let ttl = Duration::from_millis(800);

    assert!(db.try_lease("reconcile", "a", ttl).await.unwrap());
    assert!(!db.try_lease("reconcile", "b", ttl).await.unwrap());
    // The holder renews; other names are independent.
    assert!(db.try_lease("reconcile", "a", ttl).await.unwrap());
    assert!(db.try_lease("other", "b", ttl).await.unwrap());

    tokio::time::sleep(ttl + Duration::from_millis(200)).await;

    assert!(db.try_lease("reconcile", "b", ttl).await.unwrap());
    assert!(!db.try_lease("reconcile", "a", ttl).await.unwrap());
    assert!(!db.release_lease("reconcile", "a").await.unwrap());
    assert!(db.release_lease("reconcile", "b").await.unwrap());
    assert!(db.try_lease("reconcile", "a", ttl).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_many_contenders_at_once_exactly_one_gets_the_lease() {
    let test_db = TestDb::create().await;
    let db = test_db.db();

    let contenders = (0..4).map(|i| {
        let db = db.clone();
        async move {
            db.try_lease("reconcile", &format!("holder-{i}"), Duration::from_secs(30))
                .await
        }
    });
    let results = futures::future::join_all(contenders).await;

    let winners = results.into_iter().filter(|r| *r.as_ref().unwrap()).count();
    assert_eq!(winners, 1);
}
