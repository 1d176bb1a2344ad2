import BasketSync
import Glibc
import BasketSyncWire

extension Commands {
    /// What `wait` found.
    public struct WaitResult {
        /// The seq waited after.
        public var after: UInt64
        /// The outbox records after it, each its JSON line as the outbox holds it (with `\n`).
        public var lines: [[UInt8]]
    }

    /// `wait`: blocks until the outbox holds a record after `after` (default: where the host is,
    /// from the cart's `syncedThrough` and what the database knows), and returns those records.
    /// It sleeps on inotify (the outbox file changing, another process's commit) — and looks at
    /// every poll interval too where inotify is blind (`watch.mode`, docs/spec.md §10) — and writes
    /// nothing: it works beside the agent, beside `sync` from cron, and on a read-only file
    /// system. Throws `.busy` (75) when `timeout` seconds pass first.
    ///
    /// Taking the host's progress from the cart (no `after`), it lists nothing while the cart
    /// cannot be read (`apply` would fail on it: a host loop would run again and again); it says
    /// so once through `unreadable`, and lists the records once the cart is mended (its write
    /// wakes the wait).
    public static func wait(directory: String, after: UInt64?, timeout: Double?, unreadable: (AgentError) -> Void = { _ in }) throws(AgentError) -> WaitResult {
        let configuration = try AgentConfiguration.load(directory: directory)
        // The watches first: a record committed after this is seen by the reads below, or wakes us.
        // Every look opens a connection of its own and closes it: on a read-only file system
        // SQLite cannot share the WAL index, and a connection kept open (or any other of this
        // process, which SQLite would share it with) would read the same snapshot for ever.
        let inotify: Inotify
        let start: UInt64
        // Every file reached where the store reaches them (a tree's cart: its folder as opened,
        // held for the whole wait).
        let folder: CartFolder?
        let shown = directory
        let directory: String
        do {
            let store = try Store.open(directory: shown, readOnly: true)
            (folder, directory) = (store.folder, store.directory)
            do {
                inotify = try Inotify(path: directory)
                try inotify.watch(directory, [.modify, .closeWrite, .movedTo, .create, .deleteSelf, .moveSelf, .onlyDirectory])
                try inotify.watch(store.stateDirectory, [.closeWrite, .movedTo, .create, .deleteSelf, .moveSelf, .onlyDirectory])
            } catch {
                throw .system(error)
            }
            if let after {
                start = after
            } else if store.database.connection.missesCommits {
                // The host's progress read from commits behind would list records it applied.
                throw .busy("\(store.databasePath): this read-only view cannot read the database's last commits (its write-ahead log is there, its index -shm is not): the host's progress is unknown here; give --after SEQ (the last record the host applied), or run wait where the directory is writable")
            } else {
                let state = try store.withTransaction { () throws(AgentError) in try store.loadState() }
                start = try CartReader.hostProgress(state, store: store, directory: directory, configuration: configuration, refusingClaimBeyond: true)
            }
        }
        // Where inotify is blind (a share written by another machine: docs/spec.md §10), it looks at
        // every poll interval as well.
        let polling = (try? WatchChoice.decide(directory: directory, cart: configuration.cart, settings: configuration.watch, override: nil))
            .flatMap { $0.polls ? $0.intervalMs : nil }
        let outboxPath = "\(directory)/\(Projection.outbox.fileName)"
        // The host's progress taken from the cart: a cart that cannot be read holds the records
        // back (below), and its write is worth a look.
        let judgesCart = after == nil
        var saidUnreadable = false
        let loop = WaitLoop(inotify: inotify, path: directory, pollMs: polling, timeout: timeout)
        let lines = try loop.run(timedOut: "\(outboxPath): no record after seq \(start) within \(timeout ?? 0) s; run wait again to go on waiting",
                                 worthALook: { event in
            // The outbox file changing, a commit signalled, the database written over or
            // replaced (a backup restored); SQLite closing its own files (a reader such as
            // status) is not.
            event.name == Projection.outbox.fileName || event.name == Layout.commitSignal || event.name == Layout.cartMarker
                || event.name == Layout.database || (judgesCart && event.name == configuration.cart)
        }, gone: {
            // A tree cart's folder moved: judged as every command judges it now — another cart's
            // folder at its name (a swap) refused, 73; none there, the cart left the tree and is
            // kept so long, 66 — never called a sync directory removed with its state.
            guard folder != nil else { return .directoryGone(path: shown) }
            do throws(AgentError) { _ = try Store.open(directory: shown, readOnly: true) } catch { return error }
            return .directoryGone(path: shown)
        }) { () throws(AgentError) -> [[UInt8]]? in
            // A connection of its own per look: on a read-only file system SQLite cannot share
            // the WAL index, and a connection kept open would read the same snapshot for ever.
            let (committed, last, noted) = try outboxNow(directory: shown, after: start)
            // A database restored from an older backup: the outbox holds what it does not. A
            // record commits before it is appended: one committed since the read above is
            // read again before the database is called behind.
            if let beyond = JSONLinesFile(path: outboxPath).recordBeyond(databaseSeq: last, isRecord: Projection.outbox.isRecord),
               beyond > (try outboxNow(directory: shown, after: nil).last) {
                // On a read-only file system SQLite reads only what was checkpointed into the
                // database file: the outbox, appended after each commit, is the fresher one.
                guard Posix.isReadOnlyFileSystem(directory) else {
                    throw .databaseBehind(path: outboxPath, fileSeq: beyond, databaseSeq: last)
                }
                let fresher = JSONLinesFile(path: outboxPath).recordLines(after: start, isRecord: Projection.outbox.isRecord)
                if !fresher.isEmpty { return fresher }
            }
            // Only the records a file holds: one committed whose line is not appended yet
            // (another process holds the cart's writers' lock) waits for its line, which wakes
            // this loop — a host reading outbox.jsonl after `wait` finds what it printed.
            let inFile = Self.outboxInFile(path: outboxPath, committed: committed.last?.seq ?? 0, noted: noted)
            let lines = committed.prefix { $0.seq <= inFile }
            if judgesCart, !lines.isEmpty, let error = CartReader.unreadable(in: directory, configuration: configuration) {
                if !saidUnreadable { unreadable(error) }
                saidUnreadable = true
                return nil
            }
            return lines.isEmpty ? nil : lines.map(\.line)
        }
        withExtendedLifetime(folder) {}
        return WaitResult(after: start, lines: lines)
    }

    /// The outbox records after `seq`, its last seq, and through which seq the files were given
    /// its records (noted after each append), through a connection opened and closed for this
    /// read alone.
    private static func outboxNow(directory: String, after seq: UInt64?) throws(AgentError) -> (lines: [(seq: UInt64, line: [UInt8])], last: UInt64, noted: UInt64) {
        let reader = try Store.open(directory: directory, readOnly: true)
        return try reader.withTransaction { () throws(AgentError) in
            (try seq.map { (after) throws(AgentError) in try reader.lines(.outbox, after: after) } ?? [], try reader.lastSeq(.outbox), try reader.given(.outbox)?.seq ?? 0)
        }
    }

    /// Of the outbox records through `committed`, the last one whose line a file holds: what
    /// the files were given (`noted`, written after each append), or — the note behind (a
    /// process killed between an append and its note, or still holding the writers' lock
    /// after its append) — the last record of `outbox.jsonl` itself. A record committed while
    /// another process holds the writers' lock is not yet in either.
    static func outboxInFile(path: String, committed: UInt64, noted: UInt64) -> UInt64 {
        if noted >= committed { return committed }
        let last = JSONLinesFile(path: path).lastRecord(isRecord: Projection.outbox.isRecord).map { RecordFormat.seq(ofLine: $0.line) } ?? 0
        return min(committed, max(noted, last))
    }
}
