import BasketSync
import BasketSyncWire

/// The SQLite database file of a sync directory or of a tree of carts: one connection, its
/// prepared statements, and the transactions. Every row of every table belongs to one cart
/// (column `cart`: 0 in a single sync directory, the cart's number in a tree); a ``Store`` reads
/// and writes one cart's rows.
///
/// Every change runs in one `BEGIN IMMEDIATE` transaction, so the agent and one-shot commands
/// serialize on the database; `synchronous=FULL` makes a commit durable before it returns.
final class Database {
    /// The directory of the database, its signal and its locks: `.basket-sync/` of the sync
    /// directory or the tree, or the `"database"` setting's.
    let stateDirectory: String
    /// `.basket-sync/` of the sync directory or the tree, where ever the database is: it marks
    /// the directory as basket-sync's, and holds the agent's lock (on the share itself, so that
    /// a second agent is refused on any machine where the file system carries locks between
    /// machines) and `database-id`, which database serves it.
    let markerDirectory: String
    let connection: SQLiteConnection
    /// The file one-shot commands touch once they committed, which a running agent watches
    /// (inotify) or looks at (polled): a sync directory's only signal; in a tree, touched after
    /// the cart's marker (each cart's own signal), so that a polling agent looks at the markers
    /// only when it changed.
    var commitSignalPath: String { "\(stateDirectory)/\(Layout.commitSignal)" }

    /// `projections.lock` open for its locks, opened once per database: opening it for every
    /// catch-up and closing it after is an inotify event (a close after writing) that would wake
    /// the agent once per change. Opened again when the path no longer names it (removed, made
    /// again): a lock on a file others no longer open would exclude nobody.
    func projectionsLockDescriptor() throws(SystemError) -> Int32 {
        let path = projectionsLockPath
        if let held = projectionsLock {
            if let now = Posix.info(path, follow: false), now.device == held.info.device, now.inode == held.info.inode { return held.fd }
            Posix.close(held.fd)
            projectionsLock = nil
        }
        let opened = try Posix.openWithInfo(path, [.readWrite, .create], mode: 0o600)
        projectionsLock = opened
        return opened.fd
    }

    deinit {
        if let held = projectionsLock { Posix.close(held.fd) }
    }

    /// Tells a running agent that this process committed (see ``commitSignalPath``).
    func signalCommit() {
        Posix.touch(commitSignalPath, mode: 0o600)
    }
    /// Opened for reading only: transactions are deferred, nothing is written.
    let readOnly: Bool
    /// The database file, and which file it was when opened (device, inode).
    let databasePath: String
    private let databaseIdentity: FileIdentity?
    /// The device and inode of `-wal` and `-shm`, once seen.
    private var companionIdentities: [FileIdentity?] = [nil, nil]
    /// Counts the transactions and savepoints rolled back: a cart's cached state read before
    /// one may hold what it undid.
    private(set) var rollbacks = 0
    /// The statements kept from literal SQL, by the address of their text and the table filled in
    /// (0: none): looking one up hashes two integers, not the text.
    private var statements: [StatementKey: SQLiteConnection.Statement] = [:]
    /// The statements kept from SQL built at run time (the rare paths: retention, a cart ended).
    private var builtStatements: [String: SQLiteConnection.Statement] = [:]
    /// `projections.lock`, held open between catch-ups (see ``projectionsLockDescriptor()``).
    private var projectionsLock: (fd: Int32, info: FileInfo)?
    /// Where `projections.lock` is (made once: a catch-up locks it at every change).
    private(set) lazy var projectionsLockPath = "\(stateDirectory)/\(Layout.projectionsLock)"
    /// The database's `-wal` and `-shm`, checked at every transaction.
    private lazy var companionPaths = [databasePath + "-wal", databasePath + "-shm"]
    /// Inside a transaction: each cart's kept values are read once, in its image (``MetaImage``).
    var usesMetaImages = false
    /// Inside a write transaction: the images are written to the table just before the commit
    /// (outside one, a value set is written at once).
    var imagesWritable = false
    /// Whether the table of kept values is there (a reader of a database of layout 4 finds none).
    private(set) var hasKeptTable = true
    /// The images of the carts the running transaction touched.
    var metaImages: [Int64: MetaImage] = [:]
    /// The carts' images as this connection last read or committed them, while no other
    /// connection committed since (`PRAGMA data_version`, ``committedImagesVersion``): a cart's
    /// values are read again only when another process wrote. At most ``committedImagesBound``.
    var committedImages: [Int64: MetaImage] = [:]
    var committedImagesVersion: Int64 = -1
    static let committedImagesBound = 512
    /// Inside a transaction: whether ``committedImages`` was checked against `data_version` yet.
    var committedImagesChecked = false
    /// What the savepoints' steps wrote in the images, to take it back (``MetaUndo``).
    var metaUndo: [MetaUndo] = []
    /// Where each open savepoint began in ``metaUndo``.
    var savepointMarks: [Int] = []

    /// The layout this version writes: 2 keeps the ids of orders and transfers in tables, and the
    /// host cart beside the state, not in it; 3 gives every row its cart (a tree of carts); 4
    /// keeps the host cart's latest changes beside it (``MetaKey/hostCartChanges``), which a
    /// version before would not read; 5 keeps a cart's small values in one row (``MetaImage``),
    /// converted a cart at a time as it is written (a reader reads either).
    static let schemaVersion: Int64 = 5
    /// The oldest layout read as it is by a reader (`status`): 3 differs from 4 only by a key it
    /// never holds, and 4 from 5 by the rows a cart's values are in, which are read either way.
    static let oldestReadable: Int64 = 3

    /// Opens the database of `directory` (a sync directory or a tree's root), creating
    /// `.basket-sync/` (0700) and the file when `create` is set. `readOnly` opens it for reading
    /// only (`status`): it works on a read-only file system.
    /// `rebinding` (`init --rebind`): a database elsewhere is bound to this directory's `.basket-sync/`
    /// when it holds its id in another folder (see ``checkServes(rebinding:)``).
    init(directory: String, create: Bool, readOnly: Bool = false, rebinding: Bool? = nil, busyTimeoutMilliseconds: Int32 = 15_000) throws(AgentError) {
        self.readOnly = readOnly
        // Real paths (see ``place(of:)``). A broken configuration is every other command's
        // refusal (78); `status` (read only) reports it over what the defaults show.
        let place: (marker: String, state: String, elsewhere: String?)
        do { place = try Database.place(of: directory) } catch where readOnly && error.exitCode == 78 {
            // Over the defaults only where they hold a database: a broken `"database"` setting
            // is the refusal (78), not a database said gone from `.basket-sync/`.
            let marker = "\(Posix.resolved(directory) ?? directory)/\(Layout.stateDirectory)"
            guard Posix.exists("\(marker)/\(Layout.database)") else { throw error }
            place = (marker, marker, nil)
        }
        let elsewhere = place.elsewhere
        (markerDirectory, stateDirectory) = (place.marker, place.state)
        // A link among them sits in a directory that only its owner (or root) may change.
        if let elsewhere, Posix.dirname(of: elsewhere) != Posix.dirname(of: stateDirectory),
           let refusal = Trust.directoryRefusal(Posix.dirname(of: Posix.dirname(of: elsewhere))) {
            throw .database(path: "\(stateDirectory)/\(Layout.database)", message: "not opened: \"database\" leads through a link (\(Posix.dirname(of: elsewhere))) in a directory others may change: " + refusal)
        }
        let databasePath = "\(stateDirectory)/\(Layout.database)"
        // SQLite opens these by name, following links and blocking on a FIFO: what is not a
        // regular file (the state directory: not a directory) is refused before it gets there.
        if let info = Posix.info(stateDirectory, follow: false), info.kind != .directory {
            // The `"database"` directory is basket-sync's alone, as `.basket-sync/` is: a link
            // or a file there is refused as a database not its own (74), named.
            if let elsewhere {
                throw .database(path: databasePath, message: "not opened: \"database\" in \(AgentConfiguration.fileName) names \(elsewhere), which is \(info.kind.name), not a directory: it must be a directory of basket-sync's own (a link is never followed there); set the directory it leads to, or make \(elsewhere) one (mkdir, mode 0700) and move the database's files (state.db*) into it")
            }
            throw .system(SystemError(path: stateDirectory, shape: info.kind.name, expectsDirectory: true))
        }
        // basket-sync's own, or refused before SQLite opens anything (docs/spec.md §7).
        try Database.checkTrusted(stateDirectory: stateDirectory, databasePath: databasePath)
        for path in [databasePath, databasePath + "-wal", databasePath + "-shm"] {
            guard let info = Posix.info(path, follow: false) else { continue }
            if info.kind != .regular { throw .system(SystemError(path: path, shape: info.kind.name)) }
            // A hard link: SQLite would write the file its other names are (docs/spec.md §7).
            if info.links > 1 {
                throw .refused("\(path): has \(info.links) names (a hard link): SQLite would write the file the other names are too. Give it a name of its own (cp it to a new file and move that over it; back up with cp or sqlite3 .backup, never with hard links)")
            }
        }
        if !Posix.exists(databasePath) {
            if Posix.isPermissionDenied(databasePath) { throw .system(SystemError(operation: "open the database", path: databasePath, code: SystemError.permissionDenied)) }
            guard create else {
                // An agent serves the directory: not gone, but elsewhere — `"database"` changed
                // under it (it goes on with the place it started with).
                if let pid = Posix.lockHolders("\(markerDirectory)/\(Layout.agentLock)").first(where: { $0 != Posix.processId }) {
                    throw .missingInput("\(databasePath): missing, while an agent (pid \(pid)) serves \(directory) with the database it started with: \"database\" in \(AgentConfiguration.fileName) was changed under it. Put the setting back; or stop the agent, move the database's files (state.db*) to the new place, and start it again")
                }
                // Its .basket-sync/ gone but records in the files: the database was lost, and a
                // plain init would refuse (73); the advice is the one that works.
                if case .treeRoot = Workspace.of(directory) {
                    throw .missingInput("\(databasePath): missing: the tree's database is gone; restore \(Layout.stateDirectory)/ from a backup, or run basket-sync -C \(directory) init --tree --adopt to make it again and adopt the carts with their records")
                }
                // The directory `"database"` names is missing (the sync directory was made):
                // said with the setting, never as a directory to init again.
                if let elsewhere, Posix.info(stateDirectory, follow: false) == nil, Posix.info(markerDirectory, follow: false)?.kind == .directory {
                    throw .missingInput("\(databasePath): missing: \"database\" in \(AgentConfiguration.fileName) names \(elsewhere), which does not exist. Set it back to where the database is (or to null if it is in \(Layout.stateDirectory)/); restore that directory from a backup; or, when it names a directory of another machine, run the command there")
                }
                if Posix.info(stateDirectory, follow: false) != nil || !Integrity.recordsHeld(in: directory).isEmpty {
                    throw .missingInput("\(databasePath): missing: the database is gone; restore \(elsewhere ?? Layout.stateDirectory + "/") from a backup (or, when \"database\" in \(AgentConfiguration.fileName) names a directory of another machine, run the command there), or run basket-sync init --adopt to go on from the files' records")
                }
                // Inside a sync directory or a tree, init is refused there: the advice names the one to use.
                if let outer = Workspace.enclosing(directory) {
                    throw .missingInput("\(directory): not a sync directory: it is inside \(outer), a sync directory or a tree of carts; run the command with -C on that directory (in a tree, on its root or on a cart right under it)")
                }
                throw .missingInput("\(directory): not a sync directory (no \(Layout.stateDirectory)/); run basket-sync init there first")
            }
            // "database" names a directory whose parent is not there: made by the operator first
            // (its owner and mode are the trust model's), never by basket-sync.
            if let elsewhere, !Posix.exists(Posix.dirname(of: stateDirectory)) {
                throw .missingInput("\(stateDirectory): its parent \(Posix.dirname(of: stateDirectory)) does not exist; make it first (mkdir -p, owned by root or basket-sync's account, writable by nobody else), then run the command again — \"database\" in \(AgentConfiguration.fileName) names \(elsewhere)")
            }
            do {
                if elsewhere != nil, !Posix.exists(markerDirectory) { try Posix.makeDirectory(markerDirectory, mode: 0o700) }
                try Posix.makeDirectory(stateDirectory, mode: 0o700)
                // SQLite would create it 0644; its -wal and -shm files take the database's mode.
                Posix.close(try Posix.open(databasePath, [.writeOnly, .create], mode: 0o600))
            } catch {
                throw .system(error)
            }
        }
        // SQLite says "unable to open database file" for several causes: name the one at hand.
        if !readOnly, let cause = Posix.unwritable(stateDirectory) {
            throw .system(SystemError(operation: "open the database", path: databasePath, code: cause))
        }
        connection = try SQLiteConnection(path: databasePath, readOnly: readOnly)
        self.databasePath = databasePath
        databaseIdentity = Posix.info(databasePath, follow: false)?.identity
        // A database renamed in between the check and the open is seen here; every transaction
        // then checks that the file at the path is still the one opened.
        try Database.checkTrusted(stateDirectory: stateDirectory, databasePath: databasePath)
        connection.setBusyTimeout(milliseconds: busyTimeoutMilliseconds)
        // A layout this version does not know would be read wrong, or written over.
        let version = try connection.scalar("PRAGMA user_version") ?? 0
        if version > Database.schemaVersion {
            throw .database(path: databasePath, message: "written by a newer basket-sync (database layout \(version), this one knows up to \(Database.schemaVersion)); run that version, or restore .basket-sync/ from a backup made by this one")
        }
        if readOnly {
            if version < Database.oldestReadable, try connection.scalar("SELECT COUNT(*) FROM sqlite_master WHERE name = 'meta'") != 0 {
                throw .database(path: databasePath, message: "\(Database.olderLayout) (database layout \(version)); run any other command once (basket-sync sync) to bring it up to date, then this one")
            }
            if elsewhere != nil, try connection.scalar("SELECT COUNT(*) FROM sqlite_master WHERE name = 'meta'") != 0 { try checkServes(rebinding: rebinding ?? false) }
            hasKeptTable = try connection.scalar("SELECT COUNT(*) FROM sqlite_master WHERE name = 'kept'") != 0
            return
        }
        // Pages freed by retention go back to the file system (SQLite can set it only on a new
        // database; an older one is converted once, see ``useIncrementalVacuum()``).
        try connection.execute("PRAGMA auto_vacuum=INCREMENTAL")
        try connection.execute("PRAGMA journal_mode=WAL")
        try connection.execute("PRAGMA synchronous=FULL")
        // The write-ahead log is cut back to this after a checkpoint, not left at its largest.
        try connection.execute("PRAGMA journal_size_limit=8388608")
        // A savepoint's journal (a cart's pass in a group, an input of a batch) in memory: a
        // few pages, not a file in /var/tmp written a page at a time.
        try connection.execute("PRAGMA temp_store=MEMORY")
        try withTransaction { () throws(AgentError) in
            let isOld = try connection.scalar("SELECT COUNT(*) FROM sqlite_master WHERE name = 'meta'") != 0
            let layout = try connection.scalar("PRAGMA user_version") ?? 0
            // An agent of an older version serving the directory (a new agent would have brought
            // the layout up at its own open): converted under it, it would read the new layout
            // wrong. Nothing changes until it is restarted with this version.
            if isOld, layout < Database.schemaVersion,
               Posix.lockHolders("\(markerDirectory)/\(Layout.agentLock)").contains(where: { $0 != Posix.processId }) {
                throw .busy("\(Posix.dirname(of: markerDirectory)): an agent of an older basket-sync serves it (database layout \(layout), this version writes \(Database.schemaVersion)); restart the agent with this version first (systemctl restart basket-sync@…), then run this again — nothing was changed")
            }
            if isOld, layout < 3 {
                try convertToCartRows()
            } else {
                try connection.execute(Database.tables)
                try connection.execute("PRAGMA user_version=\(Database.schemaVersion)")
            }
            if elsewhere == nil { try keepServingOwnDirectory() }
        }
        if elsewhere != nil { try checkServes(rebinding: rebinding ?? false) }
    }

    /// The id a database keeps of the directory it serves, and the one that directory's
    /// `.basket-sync/database-id` holds (nil: none, or unreadable).
    private var servedIds: (kept: String?, onShare: String?) {
        get throws(AgentError) {
            let onShare = ((try? Posix.readFile("\(markerDirectory)/database-id", limit: 64)) ?? nil).map { String(decoding: $0, as: UTF8.self).trimmingSpaces }
            return (try rootRows.note(.servesDirectory), onShare)
        }
    }

    /// A database in its directory's own `.basket-sync/` serves that directory: it keeps the
    /// directory's id (written to `database-id` when there is none), so that another directory
    /// whose `"database"` names it is refused (``checkServes(rebinding:)``) — one that took it before is
    /// refused from now on. Inside the opening transaction.
    private func keepServingOwnDirectory() throws(AgentError) {
        let (kept, onShare) = try servedIds
        if let onShare, kept == onShare { return }
        let id = onShare ?? Store.newSyncId()
        if onShare == nil {
            do { try Posix.writeFileAtomically("\(markerDirectory)/database-id", Array("\(id)\n".utf8), mode: 0o600) } catch { throw .system(error) }
        }
        try rootRows.setNote(.servesDirectory, id)
    }

    /// With `"database"` elsewhere, a database serves one sync directory (or tree): the one whose
    /// `.basket-sync/database-id` holds the id it keeps, in the `.basket-sync/` it was bound to
    /// (its device and inode, kept beside the id). Another directory naming the same one (a
    /// setting copied) is refused before anything of it is read or written — and so is a copy of
    /// the directory (`cp -a`: the same id in another `.basket-sync/`), unless `init --rebind`
    /// (`rebinding`) says this is the directory, moved or restored, and binds it here; a database
    /// without an id (moved there, or new) takes this directory's, or a new one.
    private func checkServes(rebinding: Bool) throws(AgentError) {
        let idPath = "\(markerDirectory)/database-id"
        let root = rootRows
        let (note, onShare) = try withTransaction { () throws(AgentError) in try servedIds }
        let here = Posix.info(markerDirectory, follow: false).map { "\($0.device):\($0.inode)" }
        let bound = note.map { $0.split(separator: "\t", omittingEmptySubsequences: false).map(String.init) } ?? []
        if let kept = bound.first {
            guard kept != onShare else {
                // Bound to this `.basket-sync/`, or to none yet (a database of an older version).
                if bound.count >= 2, bound[1] == here || here == nil { return }
                if bound.count >= 2, !rebinding {
                    throw .database(path: databasePath, message: "not used: it serves the sync directory (or tree) whose .basket-sync/ holds the id \(kept), and \(markerDirectory)/ is another folder holding it — a copy of that directory (cp -a?). Give this one a \"database\" directory of its own and remove \(idPath); or, if this is that directory moved or restored, run basket-sync -C \(Posix.dirname(of: markerDirectory)) init --rebind to bind the database to it")
                }
                guard !readOnly, let here else { return }
                try withTransaction { () throws(AgentError) in try root.setNote(.servesDirectory, "\(kept)\t\(here)") }
                return
            }
            throw .database(path: databasePath, message: "not used: it serves another sync directory or tree (its id \(kept) is not in \(idPath)\(onShare.map { ", which holds \($0)" } ?? "")); give \(Posix.dirname(of: markerDirectory)) a \"database\" directory of its own, or, if this is its own database and that file was lost, write \(kept) into it")
        }
        guard !readOnly else { return }
        let id = onShare ?? Store.newSyncId()
        if onShare == nil {
            do { try Posix.writeFileAtomically(idPath, Array("\(id)\n".utf8), mode: 0o600) } catch { throw .system(error) }
        }
        try withTransaction { () throws(AgentError) in try root.setNote(.servesDirectory, here.map { "\(id)\t\($0)" } ?? id) }
    }

    /// What is wrong with where the database is, or nil: on a network or userspace file system,
    /// SQLite's write-ahead log (its shared memory, its locks) is not safe.
    var placeWarning: String? {
        if connection.missesCommits {
            return "the database \(databasePath) is read without its last commits: its write-ahead log is there but not its index (-shm), which this read-only view cannot make — what is shown may be behind what was committed (never a database lost); read it where the directory is writable"
        }
        guard let kind = FileSystemKind.of(stateDirectory), kind.isBlindToInotify else { return nil }
        return "the database \(databasePath) is on \(kind.name), a network or userspace file system: SQLite's write-ahead log needs shared memory and locks such a file system does not give (commands on another machine could corrupt it); set \"database\" in \(AgentConfiguration.fileName) to a directory on a local disk (docs/network-file-systems.md)"
    }

    /// Where the database of `directory` (a sync directory or a tree's root) is: its
    /// `.basket-sync/` (the marker, with the agent's lock), the directory of the database (the
    /// same, or the one its `"database"` setting names), and that setting. The directory and its
    /// parents may be links (the operator's, as /var/lib/x → /data/x): real paths are given, as
    /// SQLite opens only a path without links; the database's directory itself must not be one.
    static func place(of directory: String) throws(AgentError) -> (marker: String, state: String, elsewhere: String?) {
        let marker = "\(Posix.resolved(directory) ?? directory)/\(Layout.stateDirectory)"
        guard let elsewhere = try AgentConfiguration.load(directory: directory).database else { return (marker, marker, nil) }
        let parent = Posix.dirname(of: elsewhere)
        return (marker, "\(Posix.resolved(parent) ?? parent)/\(Posix.basename(of: elsewhere))", elsewhere)
    }

    /// The database file of `directory` (a sync directory or a tree's root).
    static func path(of directory: String) throws(AgentError) -> String {
        "\(try place(of: directory).state)/\(Layout.database)"
    }

    /// Refuses (74) a database that is not basket-sync's own: `.basket-sync/`, the database and
    /// its `-wal` and `-shm` owned by another account than this one or root, or writable by
    /// others, or the directory holding them open to renames (docs/spec.md §7). A database
    /// another account swapped in is never opened: the names of files it holds are never used.
    static func checkTrusted(stateDirectory: String, databasePath: String) throws(AgentError) {
        if let refusal = Trust.directoryRefusal(Posix.dirname(of: stateDirectory)) {
            throw .database(path: databasePath, message: "not opened: " + refusal)
        }
        let parts = [(stateDirectory, "the database's directory"), (databasePath, "the database"),
                     (databasePath + "-wal", "the database's log"), (databasePath + "-shm", "the database's shared memory")]
        for (path, what) in parts {
            guard let info = Posix.info(path, follow: false) else { continue }
            let otherwise = "otherwise move \(Layout.stateDirectory)/ away and restore basket-sync's own (from a backup, or with basket-sync init --adopt)"
            if let refusal = Trust.refusal(info, path: path, what: what, otherwise: otherwise) {
                throw .database(path: databasePath, message: "not opened: " + refusal)
            }
        }
    }

    // MARK: Transactions

    /// Runs `body` in one IMMEDIATE transaction: committed when it returns, rolled back when it throws.
    func withTransaction<T>(_ body: () throws(AgentError) -> T) throws(AgentError) -> T {
        try run(readOnly ? "BEGIN" : "BEGIN IMMEDIATE")
        // Under the lock: the file this connection writes must still be the database at its path.
        if Posix.info(databasePath, follow: false)?.identity.isSameFile(as: databaseIdentity) != true {
            try? run("ROLLBACK")
            throw .databaseGone(path: databasePath)
        }
        // Its write-ahead log and shared memory too: SQLite deletes them only when the last
        // connection closes, and this one is open. Deleted under it, the commits would go to an
        // unlinked file and be lost at the next start.
        if !readOnly {
            for (index, path) in companionPaths.enumerated() {
                let now = Posix.info(path, follow: false)?.identity
                if let seen = companionIdentities[index] {
                    if now?.isSameFile(as: seen) != true {
                        try? run("ROLLBACK")
                        throw .databaseGone(path: path)
                    }
                } else if let now {
                    companionIdentities[index] = now
                }
            }
        }
        usesMetaImages = true
        imagesWritable = !readOnly
        defer {
            usesMetaImages = false
            imagesWritable = false
            committedImagesChecked = false
            metaImages = [:]
            metaUndo = []
            savepointMarks = []
        }
        do {
            let result = try body()
            try writeMetaImages()
            try run("COMMIT")
            keepCommittedImages()
            return result
        } catch {
            try? run("ROLLBACK")
            rollbacks += 1
            throw error
        }
    }

    /// Runs `body`, which only reads, in one deferred transaction: a snapshot of the database as
    /// committed, without taking the write lock (and so without waiting for a writer).
    func withReadTransaction<T>(_ body: () throws(AgentError) -> T) throws(AgentError) -> T {
        try run("BEGIN")
        if Posix.info(databasePath, follow: false)?.identity.isSameFile(as: databaseIdentity) != true {
            try? run("ROLLBACK")
            throw .databaseGone(path: databasePath)
        }
        usesMetaImages = true
        defer {
            usesMetaImages = false
            committedImagesChecked = false
            metaImages = [:]
            try? run("COMMIT")
        }
        return try body()
    }

    /// Runs `body` inside the caller's transaction under a savepoint: undone alone when it throws
    /// (one input of a group that fails does not undo the others).
    func withSavepoint<T>(_ body: () throws(AgentError) -> T) throws(AgentError) -> T {
        try run("SAVEPOINT step")
        savepointMarks.append(metaUndo.count)
        do {
            let result = try body()
            try run("RELEASE step")
            savepointMarks.removeLast()
            // Released into the transaction: nothing left to take back but by a savepoint around it.
            if savepointMarks.isEmpty { metaUndo.removeAll(keepingCapacity: true) }
            return result
        } catch {
            try? run("ROLLBACK TO step")
            try? run("RELEASE step")
            undoMeta(to: savepointMarks.removeLast())
            rollbacks += 1
            throw error
        }
    }

    /// Runs a statement that returns no rows from the statements kept: `BEGIN`, `COMMIT` and
    /// their kin are parsed once, not at every transaction.
    private func run(_ sql: StaticString) throws(AgentError) {
        let statement = try cached(sql)
        defer { statement.reset() }
        _ = try statement.step()
    }

    /// A prepared statement kept for the life of the connection.
    func cached(_ sql: StaticString) throws(AgentError) -> SQLiteConnection.Statement {
        try kept(StatementKey(text: UInt(bitPattern: sql.utf8Start), table: 0)) { sql.description }
    }

    /// A prepared statement kept for the life of the connection, from a literal whose `{table}`
    /// is the projection's table.
    func cached(_ template: StaticString, table projection: Projection) throws(AgentError) -> SQLiteConnection.Statement {
        try kept(StatementKey(text: UInt(bitPattern: template.utf8Start), table: projection.tableNumber)) {
            template.description.replacingOccurrences(of: "{table}", with: projection.rawValue)
        }
    }

    /// The statement kept under `key`, prepared from `sql()` the first time.
    private func kept(_ key: StatementKey, _ sql: () -> String) throws(AgentError) -> SQLiteConnection.Statement {
        if let statement = statements[key] { return statement }
        let statement = try connection.prepare(sql())
        statements[key] = statement
        return statement
    }

    /// A prepared statement kept for the life of the connection, from SQL built at run time.
    func cached(built sql: String) throws(AgentError) -> SQLiteConnection.Statement {
        if let statement = builtStatements[sql] { return statement }
        let statement = try connection.prepare(sql)
        builtStatements[sql] = statement
        return statement
    }

    /// Changes whenever another connection committed (`PRAGMA data_version`).
    func dataVersion() throws(AgentError) -> Int64 {
        let statement = try cached("PRAGMA data_version")
        defer { statement.reset() }
        return try statement.step() ? statement.int64(0) : 0
    }

    // MARK: The carts of a tree

    /// Whether `init --tree` made this database (kept in the tree's own row, cart 0).
    func isTree() throws(AgentError) -> Bool {
        let statement = try cached("SELECT 1 FROM meta WHERE cart = 0 AND key = 'layout' AND value = CAST('tree' AS BLOB)")
        defer { statement.reset() }
        return try statement.step()
    }

    /// Marks the database as a tree's (in the caller's transaction).
    func markTree() throws(AgentError) {
        try connection.execute("INSERT OR REPLACE INTO meta(cart, key, value) VALUES(0, 'layout', CAST('tree' AS BLOB))")
    }

    /// The carts of a tree, by id, with their numbers.
    func carts() throws(AgentError) -> [String: Int64] {
        let statement = try cached("SELECT id, n FROM carts")
        defer { statement.reset() }
        var carts: [String: Int64] = [:]
        while try statement.step() { carts[statement.text(0)] = statement.int64(1) }
        return carts
    }

    /// The last outbox seq of every cart that has records, by cart number: one indexed walk.
    func lastOutboxSeqs() throws(AgentError) -> [Int64: UInt64] {
        let statement = try cached("SELECT cart, MAX(seq) FROM outbox GROUP BY cart")
        defer { statement.reset() }
        var seqs: [Int64: UInt64] = [:]
        while try statement.step() { seqs[statement.int64(0)] = UInt64(statement.int64(1)) }
        return seqs
    }

    /// The number and sync id of cart `id`, if the tree has it.
    func cart(_ id: String) throws(AgentError) -> (number: Int64, syncId: String)? {
        let statement = try cached("SELECT n, sync_id FROM carts WHERE id = ?")
        defer { statement.reset() }
        statement.bind(1, id)
        return try statement.step() ? (statement.int64(0), statement.text(1)) : nil
    }

    /// The id of the cart whose sync id is `syncId`, if the tree has it.
    func cartId(syncId: String) throws(AgentError) -> String? {
        let statement = try cached("SELECT id FROM carts WHERE sync_id = ?")
        defer { statement.reset() }
        statement.bind(1, syncId)
        return try statement.step() ? statement.text(0) : nil
    }

    /// Adds cart `id` (in the caller's transaction) under a number never used before.
    func addCart(_ id: String, syncId: String, at: Date) throws(AgentError) -> Int64 {
        let statement = try cached("INSERT INTO carts(id, sync_id, made) VALUES(?, ?, ?) RETURNING n")
        defer { statement.reset() }
        statement.bind(1, id)
        statement.bind(2, syncId)
        statement.bind(3, Timestamp.text(at))
        guard try statement.step() else { throw .database(path: databasePath, message: "adding cart \(id) returned no number") }
        return statement.int64(0)
    }

    /// Ends cart `number`: every row of it goes (in the caller's transaction).
    func removeCart(_ number: Int64) throws(AgentError) {
        for table in Table.allCases where table.holdsCartRows {
            let statement = try cached(built: "DELETE FROM \(table.rawValue) WHERE cart = ?")
            defer { statement.reset() }
            statement.bind(1, number)
            _ = try statement.step()
        }
        forgetMeta(of: number)
        let statement = try cached("DELETE FROM carts WHERE n = ?")
        defer { statement.reset() }
        statement.bind(1, number)
        _ = try statement.step()
    }
}

/// The rows of one cart in the ``Database``: its library state, every record of the three
/// projections, the inbox ids already taken, and the reports. The single source of truth of the

/// Which kept statement: the address of its literal text, and the projection whose table it names
/// (0: none).
private struct StatementKey: Hashable {
    let text: UInt
    let table: Int
}
