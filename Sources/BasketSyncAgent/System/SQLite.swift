import Glibc
import CSQLite

/// One SQLite connection. Every sqlite3 call of the package is in this file.
final class SQLiteConnection {
    private var handle: OpaquePointer?
    let path: String
    /// Opened immutable while its write-ahead log holds commits it cannot read (a read-only
    /// view without the log's index): what it reads may be behind what was committed.
    private(set) var missesCommits = false

    /// SQLite's SQLITE_TRANSIENT: bound text is copied at once.
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    /// `readOnly` opens for reading; on a read-only file system the database is opened immutable
    /// (nobody can change it there, and its WAL index cannot be made) — and so on a full one
    /// while its write-ahead log holds nothing (none left by the last connection, or one made
    /// empty by a writer the full disk stopped): the database file holds everything, and its
    /// WAL index could not be made either.
    init(path: String, readOnly: Bool = false) throws(AgentError) {
        self.path = path
        var handle: OpaquePointer?
        let access = readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
        var flags = access | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW
        var name = path
        // On a read-only view of a database another process writes (a read-only bind mount
        // beside the agent), its `-wal` and `-shm` are there: SQLite reads them (a private copy
        // of the WAL index) and sees every commit. Only without them is it opened immutable —
        // and then a WAL that is not empty holds commits this reader cannot see.
        let wal = Posix.info(path + "-wal", follow: false)?.size ?? 0
        let readable = wal > 0 && Posix.info(path + "-shm", follow: false) != nil
        let escaped = path.map { character -> String in
            switch character {
            case "%": return "%25"
            case "?": return "%3f"
            case "#": return "%23"
            default: return String(character)
            }
        }.joined()
        let immutableName = "file:\(escaped)?immutable=1"
        if readOnly, (Posix.unwritable(Posix.dirname(of: path)) == EROFS && !readable)
            || (FileSystemKind.full(Posix.dirname(of: path), forOwner: geteuid()) != nil && wal == 0) {
            missesCommits = wal > 0
            flags |= SQLITE_OPEN_URI
            name = immutableName
        }
        var code = sqlite3_open_v2(name, &handle, flags, nil)
        // Through the write-ahead log of a writer on the other side of a read-only view: the
        // writer's last close may remove the log and its index while this one opens. The file
        // then holds every commit (checkpointed before the log goes): read it immutable.
        if readOnly, name == path, Posix.unwritable(Posix.dirname(of: path)) == EROFS,
           code != SQLITE_OK || sqlite3_exec(handle, "SELECT count(*) FROM sqlite_master", nil, nil, nil) != SQLITE_OK {
            sqlite3_close_v2(handle)
            handle = nil
            missesCommits = (Posix.info(path + "-wal", follow: false)?.size ?? 0) > 0
            code = sqlite3_open_v2(immutableName, &handle, flags | SQLITE_OPEN_URI, nil)
        }
        self.handle = handle
        if code != SQLITE_OK {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close_v2(handle)
            self.handle = nil
            throw AgentError.database(path: path, message: "cannot open the database: \(message); check the permissions of .basket-sync/")
        }
        sqlite3_extended_result_codes(handle, 1)
    }

    deinit { sqlite3_close_v2(handle) }

    private func error(_ code: Int32, _ what: String) -> AgentError {
        let message = String(cString: sqlite3_errmsg(handle))
        // A file system with no room left fails SQLite in many ways ("disk I/O error" when its
        // WAL index cannot be made): said as what it is, a full disk.
        if ![SQLITE_BUSY, SQLITE_LOCKED, SQLITE_CORRUPT, SQLITE_NOTADB].contains(code & 0xFF),
           FileSystemKind.full(Posix.dirname(of: path), forOwner: geteuid()) != nil {
            return .system(SystemError(operation: what, path: path, code: ENOSPC))
        }
        switch code & 0xFF {
        case SQLITE_BUSY, SQLITE_LOCKED:
            return .busy("\(path): the database stayed busy while \(what); another basket-sync holds it, try again")
        case SQLITE_FULL:
            return .system(SystemError(operation: what, path: path, code: ENOSPC))
        case SQLITE_READONLY, SQLITE_PERM, SQLITE_CANTOPEN:
            return .database(path: path, message: "\(what) failed: \(message); check that .basket-sync/ is writable")
        case SQLITE_CORRUPT, SQLITE_NOTADB:
            // Damaged (cut short, overwritten): nothing can be read or written by it; the files
            // still hold the records, and init --adopt makes a database again from them.
            let state = Posix.dirname(of: path)
            return .database(path: path, message: "\(what) failed: \(message): the database is damaged, and nothing was written. Move it aside (mv \(state) \(state).damaged) and run basket-sync init --adopt to make it again from the files, or restore \(Posix.basename(of: state))/ from a backup")
        default:
            return .database(path: path, message: "\(what) failed: \(message)")
        }
    }

    /// Runs statements that return no rows.
    func execute(_ sql: String) throws(AgentError) {
        let code = sqlite3_exec(handle, sql, nil, nil, nil)
        if code != SQLITE_OK { throw error(code, "running \(sql.prefix(40))") }
    }

    /// Waits up to `milliseconds` for a lock held by another process before failing as busy.
    /// Rows changed by the last statement.
    var changes: Int { Int(sqlite3_changes(handle)) }

    func setBusyTimeout(milliseconds: Int32) { sqlite3_busy_timeout(handle, milliseconds) }

    /// Whether a transaction is open on this connection.
    var inTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    /// A prepared statement, kept for reuse.
    final class Statement {
        fileprivate let handle: OpaquePointer
        private unowned let connection: SQLiteConnection
        let sql: String

        fileprivate init(handle: OpaquePointer, connection: SQLiteConnection, sql: String) {
            self.handle = handle
            self.connection = connection
            self.sql = sql
        }

        deinit { sqlite3_finalize(handle) }

        func bind(_ index: Int32, _ value: Int64) { sqlite3_bind_int64(handle, index, value) }

        func bind(_ index: Int32, _ value: String) { sqlite3_bind_text(handle, index, value, -1, SQLiteConnection.transient) }

        /// Binds a literal in place (SQLite reads it where it is: a literal lives as long as the program).
        func bind(_ index: Int32, _ value: StaticString) {
            sqlite3_bind_text(handle, index, UnsafeRawPointer(value.utf8Start).assumingMemoryBound(to: CChar.self), Int32(value.utf8CodeUnitCount), nil)
        }

        func bind(_ index: Int32, _ bytes: [UInt8]) {
            bytes.withUnsafeBytes { buffer in
                _ = sqlite3_bind_blob(handle, index, buffer.baseAddress, Int32(buffer.count), SQLiteConnection.transient)
            }
        }

        /// Steps once: true while a row is available.
        func step() throws(AgentError) -> Bool {
            let code = sqlite3_step(handle)
            switch code {
            case SQLITE_ROW: return true
            case SQLITE_DONE: return false
            default:
                sqlite3_reset(handle)
                throw connection.error(code, "running \(sql.prefix(40))")
            }
        }

        /// Resets for the next use and clears the bindings.
        func reset() {
            sqlite3_reset(handle)
            sqlite3_clear_bindings(handle)
        }

        func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }

        func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }

        func text(_ column: Int32) -> String {
            guard let pointer = sqlite3_column_text(handle, column) else { return "" }
            return String(cString: pointer)
        }

        func blob(_ column: Int32) -> [UInt8] {
            let count = Int(sqlite3_column_bytes(handle, column))
            guard count > 0, let pointer = sqlite3_column_blob(handle, column) else { return [] }
            return Array(UnsafeRawBufferPointer(start: pointer, count: count))
        }
    }

    func prepare(_ sql: String) throws(AgentError) -> Statement {
        var statement: OpaquePointer?
        let code = sqlite3_prepare_v2(handle, sql, -1, &statement, nil)
        guard code == SQLITE_OK, let statement else { throw error(code, "preparing \(sql.prefix(40))") }
        return Statement(handle: statement, connection: self, sql: sql)
    }

    /// Runs a statement that returns at most one integer.
    func scalar(_ sql: String) throws(AgentError) -> Int64? {
        let statement = try prepare(sql)
        return try statement.step() ? statement.int64(0) : nil
    }
}
