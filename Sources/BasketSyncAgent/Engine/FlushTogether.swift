import CStatfs
import Glibc

/// Lines of many carts flushed together (docs/spec.md §6): one `syncfs` of each file system they
/// are on; where it fails, an fsync of each file, and a file that fails is taken back (its
/// lines written again at the cart's next catch-up). What is durable is noted in one
/// transaction: for the file systems whose `syncfs` went through, one line each on the root's
/// row (``FlushedNote``); for the files fsynced alone, each file's note. The agent runs the `syncfs` on its flusher's thread; `sync` on a tree's root in
/// its own, once over every cart.
struct FlushTogether {
    /// One file's lines to flush: its cart (id and rows), which file, and the flush.
    struct Entry {
        var cart: String
        /// Told once its lines are durable, while it is kept (not held here: an engine holds its
        /// files open, and the carts waiting for a flush may be many more than the descriptors).
        weak var engine: SyncEngine?
        var store: Store
        var projection: Projection
        var flush: JSONLinesFile.Flush
    }

    var entries: [Entry] = []
    /// The stores the entries hold, each with its cart's folder open (an engine's, kept or not).
    private(set) var stores = Set<ObjectIdentifier>()
    /// A descriptor on each file system the entries are on (see ``openDevices()``).
    private(set) var devices: [(device: UInt64, fd: Int32, path: String)] = []
    /// The boot clock just before the `syncfs` began (``openDevices()`` sets it): every line
    /// appended before it is in what the `syncfs` writes back.
    private(set) var startedAt: UInt64?

    /// Takes `engine`'s lines not flushed yet.
    mutating func take(_ engine: SyncEngine, cart: String) {
        for (projection, flush) in engine.takeUnflushed() {
            entries.append(Entry(cart: cart, engine: engine, store: engine.store, projection: projection, flush: flush))
            stores.insert(ObjectIdentifier(engine.store))
        }
    }

    /// Opens one descriptor on each file system the entries are on: the folder of one of its
    /// files (a file moved away or deleted since is no reason to leave its file system out).
    mutating func openDevices() {
        for entry in entries where !devices.contains(where: { $0.device == entry.flush.given.device }) {
            let folder = Posix.dirname(of: entry.flush.path)
            guard let fd = try? Posix.open(folder, [.readOnly, .directory]),
                  (try? Posix.fileInfo(fd, path: folder))?.device == entry.flush.given.device else { continue }
            devices.append((entry.flush.given.device, fd, folder))
        }
        // The callers sync the devices right after this.
        startedAt = Posix.bootNanoseconds()
    }

    /// Writes back each file system (in the calling thread); each one's failure, in order.
    static func syncAll(_ devices: [(fd: Int32, path: String)]) -> [SystemError?] {
        devices.map { device in Posix.retrying({ basket_sync_syncfs(device.fd) }) != 0 ? SystemError.last("syncfs", device.path) : nil }
    }

    /// After the `syncfs` of each device (`failures` in their order): notes what is durable, takes
    /// back a file whose own fsync fails; returns those, by cart. Closes the descriptors.
    mutating func finish(_ failures: [SystemError?], logger: Logger) -> [(cart: String, error: SystemError)] {
        defer {
            for device in devices { Posix.close(device.fd) }
            devices = []
            entries = []
            stores = []
            startedAt = nil
        }
        let synced = Set(zip(devices, failures).compactMap { $0.1 == nil ? $0.0.device : nil })
        var failed: [(cart: String, error: SystemError)] = []
        var durable: [Int64: (store: Store, flushes: [(Projection, JSONLinesFile.Flush)])] = [:]
        // A file taken back once loses every later append with it (its earliest flush first).
        var takenBack = Set<String>()
        for entry in entries {
            let wholeDevice = synced.contains(entry.flush.given.device) && startedAt != nil
            if !wholeDevice {
                guard !takenBack.contains(entry.flush.path) else { continue }
                switch JSONLinesFile.fsyncAlone(entry.flush) {
                case .done:
                    break
                case let .failed(failure):
                    SyncEngine.takeBack(entry.store, entry.projection, entry.flush, waitingAtMost: entry.engine?.writersLockWait ?? Agent.treeWritersLockWait)
                    takenBack.insert(entry.flush.path)
                    failed.append((entry.cart, failure))
                    continue
                case .gone:
                    // Not known on disk: left to the rule of a restart of the machine.
                    continue
                }
            }
            // A file of a file system written back whole is durable by the flush's one note.
            if !wholeDevice { durable[entry.store.cart, default: (entry.store, [])].flushes.append((entry.projection, entry.flush)) }
            entry.engine?.flushed([(entry.projection, entry.flush)])
        }
        let devicesNoted = startedAt == nil ? [] : Set(entries.map(\.flush.given.device)).intersection(synced)
        guard let any = durable.values.first?.store ?? entries.first?.store else { return failed }
        do {
            try any.withQuickTransaction { () throws(AgentError) in
                if let startedAt, !devicesNoted.isEmpty {
                    let root = any.database.rootRows
                    var note = try root.note(.flushed)
                    for device in devicesNoted.sorted() { note = FlushedNote.adding(note, device: device, boot: AppendCursor.boot, at: startedAt) }
                    try root.setNote(.flushed, note!)
                }
                for (store, flushes) in durable.values { try SyncEngine.noteFlushedInTransaction(store, flushes) }
            }
        } catch {
            // Not noted: the lines are on disk; after a restart of the machine they are only looked for again.
            logger.log(.warning, "noting flushed lines failed: \(error.description)")
        }
        return failed
    }
}
