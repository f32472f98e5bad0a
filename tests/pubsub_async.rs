//! The `redis` crate's async Pub/Sub against Tessera (issue 22's "Done
//! when": real clients): `aio::PubSub` in RESP2 with channels and
//! patterns, messages from publishers on several threads arriving whole
//! and in each publisher's order, and RESP3 push messages on a
//! multiplexed connection that keeps answering ordinary commands while
//! subscribed. Every await has a deadline; every test runs in each layout
//! of [`common::LAYOUTS`] (`per_layout!`), so subscribers and publishers
//! sit on different threads.

mod common;

use std::collections::HashMap;
use std::thread;
use std::time::Duration;

use futures_util::StreamExt;
use redis::AsyncCommands;

use common::{Layout, Server};

const DEADLINE: Duration = Duration::from_secs(20);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// `fut` within [`DEADLINE`], or the test fails saying `what`.
async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {DEADLINE:?}"))
}

/// Four publishers on their own connections (threads) send `n` messages
/// each to one channel; the async subscriber, on a channel and a pattern,
/// gets each message twice (once per subscription), in each publisher's
/// order; each PUBLISH counted both receivers.
fn aio_pubsub_channels_and_patterns(layout: Layout) {
    let s: Server = layout.tessera(&[]);
    let client = s.client();
    runtime().block_on(async {
        let mut ps = within("connect", client.get_async_pubsub()).await.unwrap();
        within("subscribe", ps.subscribe("news.sport"))
            .await
            .unwrap();
        within("psubscribe", ps.psubscribe("news.*")).await.unwrap();
        let n = 200;
        let publishers: Vec<_> = (0..4)
            .map(|p| {
                let mut c = s.conn();
                thread::spawn(move || {
                    for i in 0..n {
                        let got: i64 = redis::cmd("PUBLISH")
                            .arg("news.sport")
                            .arg(format!("{p}:{i}"))
                            .query(&mut c)
                            .unwrap();
                        assert_eq!(got, 2, "PUBLISH counts the channel and the pattern");
                    }
                })
            })
            .collect();
        let mut stream = ps.on_message();
        // (pattern or not, publisher) -> next expected message number.
        let mut next: HashMap<(bool, u32), u32> = HashMap::new();
        for _ in 0..(2 * 4 * n) {
            let msg = within("message", stream.next()).await.expect("stream open");
            assert_eq!(msg.get_channel_name(), "news.sport");
            let from_pattern = msg.from_pattern();
            if from_pattern {
                assert_eq!(msg.get_pattern::<String>().unwrap(), "news.*");
            }
            let payload: String = msg.get_payload().unwrap();
            let (p, i) = payload.split_once(':').unwrap();
            let (p, i): (u32, u32) = (p.parse().unwrap(), i.parse().unwrap());
            let want = next.entry((from_pattern, p)).or_insert(0);
            assert_eq!(i, *want, "publisher {p}'s order (pattern: {from_pattern})");
            *want += 1;
        }
        drop(stream);
        for p in publishers {
            p.join().unwrap();
        }
        within("unsubscribe", ps.unsubscribe("news.sport"))
            .await
            .unwrap();
        within("punsubscribe", ps.punsubscribe("news.*"))
            .await
            .unwrap();
    });
    // Nobody listens any more (the unsubscribe replies were read).
    let mut c = s.conn();
    let got: i64 = redis::cmd("PUBLISH")
        .arg("news.sport")
        .arg("x")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, 0);
}

/// RESP3: subscriptions on a multiplexed connection deliver push messages
/// to its push sender while the same connection answers GET and SET.
fn resp3_pushes_beside_ordinary_replies(layout: Layout) {
    let s: Server = layout.tessera(&[]);
    let client = s.client_resp3();
    runtime().block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let config = redis::AsyncConnectionConfig::new().set_push_sender(tx);
        let mut con = within(
            "connect",
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await
        .unwrap();
        within("subscribe", con.subscribe("events")).await.unwrap();
        // The subscribe confirmation arrives as a push first.
        let first = within("subscribe push", rx.recv()).await.unwrap();
        assert_eq!(first.kind, redis::PushKind::Subscribe);
        let mut pubc = s.conn();
        for i in 0..50 {
            let got: i64 = redis::cmd("PUBLISH")
                .arg("events")
                .arg(format!("e{i}"))
                .query(&mut pubc)
                .unwrap();
            assert_eq!(got, 1);
            // Ordinary commands on the subscribed connection (RESP3 allows them).
            let key = format!("k{i}");
            let () = within("SET", con.set(&key, i)).await.unwrap();
            let v: i64 = within("GET", con.get(&key)).await.unwrap();
            assert_eq!(v, i);
            let push = within("message push", rx.recv()).await.unwrap();
            assert_eq!(push.kind, redis::PushKind::Message);
            assert_eq!(
                push.data,
                vec![
                    redis::Value::BulkString(b"events".to_vec()),
                    redis::Value::BulkString(format!("e{i}").into_bytes()),
                ]
            );
        }
        within("unsubscribe", con.unsubscribe("events"))
            .await
            .unwrap();
    });
}

per_layout!(
    aio_pubsub_channels_and_patterns,
    resp3_pushes_beside_ordinary_replies
);
