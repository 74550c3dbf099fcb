//! The TX engine run inside the TDT write ([`TxEngine::Sync`]) against the model thread's run
//! ([`TxEngine::Thread`]): under the virtual clock, with the model thread running right after
//! each doorbell (no wake-up latency), the same TX sequence gives the same departures, the same
//! stamps, the same write-backs and the same interrupts.

use super::*;

/// What one run of [`sequence`] produced.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    /// Every frame on the wire with its departure instant.
    sent: Vec<Sent>,
    /// After each step: MSI-X vectors raised, TSICR as the handler read it, the stamps read
    /// from sets 0..4 (L then H, set 0 last), TX descriptors written back.
    steps: Vec<Step>,
    stats: NicStats,
}

/// Vectors raised, TSICR, stamps read, descriptors written back.
type Step = (Vec<u32>, u32, Vec<u64>, Vec<bool>);

/// Posts `frames` (frame, set) in consecutive descriptors and rings the doorbell once.
fn post(r: &mut Rig, frames: &[(Vec<u8>, Option<u32>)]) {
    for (f, set) in frames {
        let i = r.tx_tail;
        let cmd = txd::EOP | txd::RS | set.map_or(0, set_bits);
        r.write_tx_desc(i, TX_BUF + i as u64 * BUF, f, cmd);
        r.tx_tail = (i + 1) % N;
    }
    r.wr(tdt(0), r.tx_tail);
}

/// One step: a doorbell for `frames`; under `Thread` the model thread runs right after the
/// write at the same virtual instant; then the "other" handler and the stamp reads.
fn step(r: &mut Rig, engine: TxEngine, frames: &[(Vec<u8>, Option<u32>)], out: &mut Outcome) {
    let first = r.tx_tail;
    post(r, frames);
    if engine == TxEngine::Thread {
        assert!(r.dev.write_wakes_model(0, tdt(0)), "thread mode wakes");
        r.poll();
    }
    let irqs = r.irqs();
    let tsicr = r.handle_other();
    let valid = r.dev.txtt();
    let stamps = (1..4)
        .chain([0])
        .filter(|&n| valid & 1 << n != 0)
        .map(|n| r.read_set(n))
        .collect();
    let dd = (0..frames.len() as u32)
        .map(|k| r.tx_dd((first + k) % N))
        .collect();
    r.host.take();
    out.steps.push((irqs, tsicr, stamps, dd));
}

/// The sequence: a lone stamped frame, two doorbells at one instant (the second frame waits
/// for the first's serialisation), two frames in one doorbell, a frame into a set still
/// holding an unread stamp, and a stamped frame at 100 Mb/s behind a long one.
fn sequence(engine: TxEngine) -> Outcome {
    let rec = Recorder::default();
    let mut r = Rig::with(|c| c.osc_error_ppb = 3_333, Box::new(rec.clone()));
    r.msix_setup();
    r.enable_ts(RxTsType::All as u32);
    r.dev.set_tx_engine(engine);
    assert_eq!(r.dev.tx_engine(), engine);
    let mut out = Outcome {
        sent: Vec::new(),
        steps: Vec::new(),
        stats: NicStats::default(),
    };
    let f = |len, seed| test_frame(len, seed);
    r.clock.advance(5_000);
    step(&mut r, engine, &[(f(60, 1), Some(0))], &mut out);
    r.clock.advance(3_000);
    step(&mut r, engine, &[(f(1500, 2), Some(1))], &mut out);
    step(&mut r, engine, &[(f(60, 3), Some(2))], &mut out);
    r.clock.advance(20_000);
    step(
        &mut r,
        engine,
        &[(f(200, 4), Some(3)), (f(90, 5), Some(0))],
        &mut out,
    );
    // Set 1 holds an unread stamp after this step's handler skips reading it.
    r.clock.advance(7_000);
    post(&mut r, &[(f(60, 6), Some(1))]);
    if engine == TxEngine::Thread {
        r.poll();
    }
    r.clock.advance(1_000);
    step(&mut r, engine, &[(f(60, 7), Some(1))], &mut out);
    r.dev.set_link_speed(LinkSpeed::Mbps100, &mut r.host);
    r.handle_other();
    r.host.take();
    r.clock.advance(50_000);
    step(
        &mut r,
        engine,
        &[(f(1000, 8), None), (f(60, 9), Some(2))],
        &mut out,
    );
    out.sent = rec.take();
    out.stats = r.dev.stats();
    out
}

#[test]
fn sync_and_threaded_engines_give_the_same_departures_stamps_and_interrupts() {
    let thread = sequence(TxEngine::Thread);
    let sync = sequence(TxEngine::Sync);
    assert_eq!(sync, thread);
    // And what they agree on is the model's timing, not an accident of both: the first frame
    // leaves the pipeline delay after its doorbell; a frame rung at the same instant as a
    // 1500-byte one waits for its serialisation at 2.5 Gb/s ((1500 + 24) · 8 / 2.5 ns).
    let t1 = START + 5_000;
    let deps: Vec<u64> = sync.sent.iter().map(|s| s.1).collect();
    assert_eq!(deps[0], t1 + DEFAULT_TX_PIPELINE_NS);
    let t2 = t1 + 3_000;
    assert_eq!(deps[1], t2 + DEFAULT_TX_PIPELINE_NS);
    assert_eq!(deps[2], deps[1] + (1524 * 8 * 1000u64).div_ceil(2500));
    // Every stamp is the PHC at its frame's departure less the 2.5 Gb/s TX latency.
    let (_, tsicr, stamps, dd) = &sync.steps[0];
    assert_eq!(*tsicr & TsCause::TXTS.bits(), TsCause::TXTS.bits());
    assert_eq!(stamps, &[phc_at(deps[0], 3_333) - TX_LAT_2500]);
    assert_eq!(dd, &[true]);
    // The time-sync vector and the TX queue vector were raised inside the write.
    assert_eq!(sync.steps[0].0, [OTHER, TXV]);
    // The frame rung into a busy set latched nothing; the 100 Mb/s stamp waited behind a
    // 1000-byte frame ((1000 + 24) · 8 / 0.1 ns).
    assert_eq!(sync.stats.tx_stamps_lost, 1);
    let n = deps.len();
    assert_eq!(deps[n - 1], deps[n - 2] + 1024 * 8 * 10);
    let last = &sync.steps.last().unwrap().2;
    assert_eq!(last, &[phc_at(deps[n - 1], 3_333) - 58]);
}

#[test]
fn a_sync_doorbell_wakes_the_model_thread_only_for_work_it_left() {
    // Nothing left: the frame went out and the recorder returns nothing.
    let rec = Recorder::default();
    let mut r = Rig::with(|_| {}, Box::new(rec.clone()));
    r.dev.set_tx_engine(TxEngine::Sync);
    r.send(&test_frame(60, 0), 0);
    assert_eq!(rec.take().len(), 1, "sent inside the write");
    assert!(!r.dev.write_wakes_model(0, tdt(0)));
    // Other registers keep their own answer.
    assert!(r.dev.write_wakes_model(0, TCTL));
    assert!(!r.dev.write_wakes_model(0, SYSTIML));
    // With the queue disabled the frame stays posted: the model thread must retry it.
    let dctl = r.rd(txdctl(0));
    r.wr(txdctl(0), dctl & !xdctl::QUEUE_ENABLE);
    r.send(&test_frame(60, 0), 0);
    assert!(rec.take().is_empty());
    assert!(r.dev.write_wakes_model(0, tdt(0)));
    r.wr(txdctl(0), dctl);
    r.poll();
    assert_eq!(rec.take().len(), 1);

    // On a loopback the frame comes back to this port: the model thread must schedule it,
    // and it arrives as in the threaded mode.
    let mut r = Rig::new();
    r.dev.set_tx_engine(TxEngine::Sync);
    let frame = test_frame(100, 1);
    r.send(&frame, 0);
    assert!(r.dev.write_wakes_model(0, tdt(0)));
    assert_eq!(r.dev.stats().tx_frames, 1);
    r.clock.advance(DEFAULT_TX_PIPELINE_NS + DELAY);
    r.poll();
    assert_eq!(r.take_rx().expect("looped back").frame, frame);
}
