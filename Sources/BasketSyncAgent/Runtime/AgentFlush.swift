import BasketSyncWire
import Foundation

/// The agent's flushes (docs/spec.md §6: one fsync per change): a change's line is written after
/// its commit and fsynced within the flush delay, the lines of every cart changed meanwhile
/// together, on the ``BackgroundFlusher``'s thread; their notes go in one transaction.
extension Agent {
    /// How long an appended line waits for its fsync, in seconds: `BASKET_SYNC_FLUSH_SECONDS`
    /// (0 to 3600; default 0.5). A longer wait only widens what a restart of the machine takes
    /// back and writes again; tests lengthen it to stand for a power cut.
    static let flushDelay: Double = {
        guard let text = Posix.environment("BASKET_SYNC_FLUSH_SECONDS"), let seconds = Double(text), seconds >= 0, seconds <= 3600 else { return 0.5 }
        return seconds
    }()

    /// Remembers the engines with lines not flushed yet, and when they are due.
    func noteUnflushed() {
        for (id, engine) in engines where engine.hasUnflushed { unflushed[ObjectIdentifier(engine)] = (engine, id) }
        if !unflushed.isEmpty, flushDue == nil { flushDue = Posix.monotonicSeconds() + Agent.flushDelay }
    }

    /// Milliseconds until the flush is due (-1: none due, or one under way).
    func flushTimeout() -> Int32 {
        guard let flushDue, !(flusher?.inFlight ?? false) else { return -1 }
        return Int32(max(0, ((flushDue - Posix.monotonicSeconds()) * 1000).rounded(.up)))
    }

    /// Starts the flush when it is due (or `now`), unless one is under way; without a flusher,
    /// flushes in this thread.
    func flushIfDue(now: Bool = false) {
        noteUnflushed()
        guard let due = flushDue, now || due <= Posix.monotonicSeconds(), !(flusher?.inFlight ?? false) else { return }
        let engines = unflushed.values
        unflushed = [:]
        flushDue = nil
        guard let flusher else {
            for (engine, id) in engines {
                do { try engine.flush() } catch { if let cart = carts[id] { fail(cart, error, engine: engine) } }
            }
            return
        }
        flushing = engines.flatMap { (engine, id) in engine.takeUnflushed().map { (engine, id, $0.0, $0.1) } }
        guard !flushing.isEmpty else { return }
        flusher.start(flushing.map { ($0.flush.fd, $0.flush.path) })
    }

    /// Ends the flush under way once it is over (with `waiting`, waits for it): notes what is
    /// durable, takes back what failed (the cart retried), closes the flush's descriptors.
    func endFlush(waiting: Bool = false) {
        guard let failures = flusher?.take(waiting: waiting) else { return }
        let done = flushing
        flushing = []
        defer { for entry in done { Posix.close(entry.flush.fd) } }
        var durable: [ObjectIdentifier: (engine: SyncEngine, flushes: [(Projection, JSONLinesFile.Flush)])] = [:]
        for (entry, failure) in zip(done, failures) {
            if let failure {
                entry.engine.flushFailed(entry.projection, entry.flush)
                if let cart = carts[entry.cart] { fail(cart, .system(failure), engine: entry.engine) }
            } else {
                durable[ObjectIdentifier(entry.engine), default: (entry.engine, [])].flushes.append((entry.projection, entry.flush))
            }
        }
        guard let any = durable.values.first?.engine else { return }
        do {
            try any.store.withQuickTransaction { () throws(AgentError) in
                for (engine, flushes) in durable.values { try engine.noteFlushedInTransaction(flushes) }
            }
        } catch {
            // Not noted: the lines are on disk; after a restart of the machine they are only looked for again.
            logger.log(.warning, "noting flushed lines failed: \(error.description)")
        }
    }

    /// Every line flushed (stopping): the flush under way waited for, then the rest.
    func flushEverything() {
        endFlush(waiting: true)
        flushIfDue(now: true)
        endFlush(waiting: true)
    }
}
