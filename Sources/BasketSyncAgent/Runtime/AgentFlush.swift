import BasketSyncWire
import Foundation

/// The agent's flushes (docs/spec.md §6: one fsync per change): a change's line is written after
/// its commit, and flushed within the flush delay with the lines of every cart changed meanwhile
/// (``FlushTogether``: one `syncfs` of their file system, on the ``BackgroundFlusher``'s thread).
extension Agent {
    /// How long an appended line waits for its flush, in seconds: `BASKET_SYNC_FLUSH_SECONDS`
    /// (0 to 3600; default 0.5). A longer wait only widens what a restart of the machine takes
    /// back and writes again; tests lengthen it to stand for a power cut.
    static let flushDelay: Double = {
        guard let text = Posix.environment("BASKET_SYNC_FLUSH_SECONDS"), let seconds = Double(text), seconds >= 0, seconds <= 3600 else { return 0.5 }
        return seconds
    }()

    /// Takes the lines not flushed yet of `engines` into the next flush (an engine that goes
    /// leaves them there), and says when it is due.
    func collectUnflushed<Engines: Sequence>(_ engines: Engines) where Engines.Element == (key: String, value: SyncEngine) {
        for (id, engine) in engines { unflushed.take(engine, cart: id) }
        if !unflushed.entries.isEmpty, flushDue == nil { flushDue = Posix.monotonicSeconds() + Agent.flushDelay }
    }

    /// Milliseconds until the flush is due (-1: none due, or one under way).
    func flushTimeout() -> Int32 {
        guard let flushDue, !(flusher?.inFlight ?? false) else { return -1 }
        return Int32(max(0, ((flushDue - Posix.monotonicSeconds()) * 1000).rounded(.up)))
    }

    /// Starts the flush when it is due (or `now`), unless one is under way; without a flusher,
    /// flushes in this thread.
    func flushIfDue(now: Bool = false) {
        // At a wake-up's end, the engines used since the last one (an engine let go left its
        // lines then); every engine when flushing now — in the middle of a wake-up's work, whose
        // engines may append again before its end: they stay marked as used.
        if now {
            collectUnflushed(engines)
        } else {
            collectUnflushed(enginesUsed.compactMap { id in engines[id].map { (key: id, value: $0) } })
            enginesUsed = []
        }
        guard let due = flushDue, now || due <= Posix.monotonicSeconds(), !(flusher?.inFlight ?? false) else { return }
        flushing = unflushed
        unflushed = FlushTogether()
        flushDue = nil
        flushing.openDevices()
        let devices = flushing.devices.map { ($0.fd, $0.path) }
        guard let flusher else { return endFlush(failures: FlushTogether.syncAll(devices)) }
        flusher.start(devices)
    }

    /// Ends the flush under way once it is over (with `waiting`, waits for it).
    func endFlush(waiting: Bool = false) {
        guard let failures = flusher?.take(waiting: waiting) else { return }
        endFlush(failures: failures)
    }

    /// Notes what the flush made durable; a cart whose file had to be taken back is retried.
    private func endFlush(failures: [SystemError?]) {
        for (id, error) in flushing.finish(failures, logger: logger) {
            if let cart = carts[id] { fail(cart, .system(error), engine: try? engine(for: cart)) }
        }
    }

    /// Every line flushed (stopping): the flush under way waited for, then the rest.
    func flushEverything() {
        endFlush(waiting: true)
        flushIfDue(now: true)
        endFlush(waiting: true)
    }
}
