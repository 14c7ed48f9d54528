//! Many futures of one kind run at once, a bounded number at a time: the
//! waits of each (an fdatasync, a file opened through io_uring) overlap
//! instead of adding up, and the window bounds what is in flight.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

/// Runs `futures` with at most `window` of them under way at once, and
/// returns their outputs in the order given.
pub async fn in_order<F: Future>(
    futures: impl IntoIterator<Item = F>,
    window: usize,
) -> Vec<F::Output> {
    let mut waiting = futures.into_iter();
    let mut running: Vec<(usize, Pin<Box<F>>)> = Vec::new();
    let mut outputs: Vec<Option<F::Output>> = Vec::new();
    std::future::poll_fn(|cx| loop {
        while running.len() < window.max(1) {
            let Some(future) = waiting.next() else { break };
            running.push((outputs.len(), Box::pin(future)));
            outputs.push(None);
        }
        if running.is_empty() {
            // Refilled first: nothing waits either.
            return Poll::Ready(());
        }
        let before = running.len();
        running.retain_mut(|(i, future)| match future.as_mut().poll(cx) {
            Poll::Ready(output) => {
                outputs[*i] = Some(output);
                false
            }
            Poll::Pending => true,
        });
        if running.len() == before {
            return Poll::Pending;
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    #[test]
    fn outputs_come_in_order_and_no_more_than_the_window_run_at_once() {
        let under_way = Rc::new(Cell::new(0usize));
        let most = Rc::new(Cell::new(0usize));
        let futures = (0..50u64).map(|i| {
            let (under_way, most) = (under_way.clone(), most.clone());
            async move {
                under_way.set(under_way.get() + 1);
                most.set(most.get().max(under_way.get()));
                // Later ones finish first: the order is the input's anyway.
                for _ in 0..(50 - i) {
                    futures_lite::future::yield_now().await;
                }
                under_way.set(under_way.get() - 1);
                i * 2
            }
        });
        let outputs = futures_lite::future::block_on(in_order(futures, 8));
        assert_eq!(outputs, (0..50).map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(most.get(), 8);
        // Futures that are ready at once, a whole window per poll.
        let ready = futures_lite::future::block_on(in_order((0..20).map(std::future::ready), 4));
        assert_eq!(ready, (0..20).collect::<Vec<_>>());
        let none =
            futures_lite::future::block_on(in_order(Vec::<std::future::Ready<u8>>::new(), 4));
        assert!(none.is_empty());
    }
}
