import CSQLite
import TestSupport

extension Playground {
    /// Rows of a read-only query on the database of the sync directory or tree at the
    /// playground's root, each column as text (empty when it cannot be read).
    func databaseRows(_ sql: String) -> [[String]] {
        var handle: OpaquePointer?
        guard sqlite3_open_v2(path + "/.basket-sync/state.db", &handle, SQLITE_OPEN_READONLY, nil) == SQLITE_OK else { return [] }
        defer { sqlite3_close(handle) }
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK else { return [] }
        defer { sqlite3_finalize(statement) }
        var rows: [[String]] = []
        while sqlite3_step(statement) == SQLITE_ROW {
            rows.append((0..<sqlite3_column_count(statement)).map { column in
                sqlite3_column_text(statement, column).map { String(cString: $0) } ?? ""
            })
        }
        return rows
    }
}
