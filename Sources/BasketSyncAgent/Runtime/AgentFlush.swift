import CStatfs
import BasketSyncWire
import Foundation

/// The agent's flushes (docs/spec.md §6: one fsync per change): a change's line is written after
/// its commit, and flushed within the flush delay with the lines of every cart changed meanwhile
/// by one `syncfs` of their file system, on the ``BackgroundFlusher``'s thread; their notes go in
/// one transaction. A `syncfs` that fails is followed by an fsync of each file, so that only the
/// files that fail are taken back (and their carts retried).
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
        for (id, engine) in engines {
            for (projection, flush) in engine.takeUnflushed() { unflushed.append((id, engine.store, projection, flush)) }
        }
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
        collectUnflushed(engines)
        guard let due = flushDue, now || due <= Posix.monotonicSeconds(), !(flusher?.inFlight ?? false) else { return }
        flushing = unflushed
        unflushed = []
        flushDue = nil
        // One descriptor on each file system the files are on.
        var devices: [UInt64: Int32] = [:]
        flushingDevices = []
        for entry in flushing where devices[entry.flush.given.device] == nil {
            guard let fd = try? Posix.open(entry.flush.path, [.readOnly]) else { continue }
            devices[entry.flush.given.device] = fd
            flushingDevices.append((entry.flush.given.device, fd, entry.flush.path))
        }
        guard let flusher else {
            endFlush(failures: flushingDevices.map { device in
                Posix.retrying({ basket_sync_syncfs(device.fd) }) != 0 ? SystemError.last("syncfs", device.path) : nil
            })
            return
        }
        flusher.start(flushingDevices.map { ($0.fd, $0.path) })
    }

    /// Ends the flush under way once it is over (with `waiting`, waits for it).
    func endFlush(waiting: Bool = false) {
        guard let failures = flusher?.take(waiting: waiting) else { return }
        endFlush(failures: failures)
    }

    /// Notes what a flush made durable; on a file system whose `syncfs` failed, each file is
    /// fsynced alone, and one that fails is taken back (its cart retried).
    private func endFlush(failures: [SystemError?]) {
        let done = flushing
        let devices = flushingDevices
        flushing = []
        flushingDevices = []
        defer { for device in devices { Posix.close(device.fd) } }
        let failed = Set(zip(devices, failures).compactMap { $0.1 == nil ? nil : $0.0.device })
        var durable: [Int64: (store: Store, flushes: [(Projection, JSONLinesFile.Flush)])] = [:]
        for entry in done {
            // A file system not written back (or no descriptor on it): each file on its own.
            if failed.contains(entry.flush.given.device) || !devices.contains(where: { $0.device == entry.flush.given.device }) {
                if let failure = JSONLinesFile.fsyncAlone(entry.flush) {
                    SyncEngine.takeBack(entry.store, entry.projection, entry.flush)
                    if let cart = carts[entry.cart] { fail(cart, .system(failure), engine: engine(for: cart)) }
                    continue
                }
            }
            durable[entry.store.cart, default: (entry.store, [])].flushes.append((entry.projection, entry.flush))
        }
        guard let any = durable.values.first?.store else { return }
        do {
            try any.withQuickTransaction { () throws(AgentError) in
                for (store, flushes) in durable.values { try SyncEngine.noteFlushedInTransaction(store, flushes) }
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
