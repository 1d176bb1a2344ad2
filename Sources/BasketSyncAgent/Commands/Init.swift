import BasketSync
import BasketSyncWire

extension Commands {
    /// `init`: creates the sync directory, its inbox, its database and a commented configuration.
    /// Idempotent: what exists is kept. Returns what was created, one line each.
    ///
    /// A directory holding records but no database lost its database: refused (73), unless
    /// `adopt`, which takes the files' records into the new database and goes on after them.
    public static func initialize(directory: String, adopt: Bool = false) throws(AgentError) -> [String] {
        var created: [String] = []
        if !Posix.isDirectory(directory) {
            try Posix.makeDirectoryTree(directory)
            created.append(directory)
        }
        for folder in ["tmp", "new", "cur", "bad"] where !Posix.isDirectory("\(directory)/inbox/\(folder)") {
            try Posix.makeDirectoryTree("\(directory)/inbox/\(folder)")
            created.append("\(directory)/inbox/\(folder)/")
        }
        let configuration = "\(directory)/\(AgentConfiguration.fileName)"
        if !Posix.exists(configuration) {
            do { try Posix.writeFileAtomically(configuration, Array(AgentConfiguration.defaultFileText.utf8)) } catch {
                throw .system(error)
            }
            created.append(configuration)
        }
        let database = "\(directory)/\(Store.stateDirectoryName)/\(Store.databaseName)"
        let isNew = !Posix.exists(database)
        var found: [Projection: [(seq: UInt64, line: [UInt8])]] = [:]
        if isNew {
            for projection in Projection.allCases {
                let path = "\(directory)/\(projection.fileName)"
                guard let bytes = try Posix.readFile(path, limit: Int.max) else { continue }
                let records = bytes.split(separator: 0x0A).compactMap { line -> (seq: UInt64, line: [UInt8])? in
                    let seq = RecordFormat.seq(ofLine: line)
                    return seq > 0 ? (seq, Array(line) + [0x0A]) : nil
                }
                if !records.isEmpty { found[projection] = records }
            }
            if !found.isEmpty && !adopt {
                let counts = found.map { "\($0.key.fileName) up to \($0.value.map(\.seq).max()!)" }.sorted().joined(separator: ", ")
                throw .refused("\(directory): holds records (\(counts)) but no database: the database was lost. A new one would number them again from 1. Restore .basket-sync/ from a backup, or run basket-sync init --adopt to go on after the files' last records")
            }
        }
        let store = try Store(directory: directory, create: true)
        if isNew { created.append(database) }
        if !found.isEmpty {
            try store.withTransaction { () throws(AgentError) in
                var state = try store.loadState()
                for (projection, records) in found {
                    for record in records { try store.adopt(projection, seq: record.seq, line: record.line) }
                    let last = records.map(\.seq).max()!
                    switch projection {
                    case .outbox: state.lastOutboxSeq = last
                    case .notifications: state.lastNotificationSeq = last
                    case .payments:
                        state.lastPaymentSeq = last
                        // A retried order must still be answered as recorded.
                        for record in records {
                            if let payment = try? RecordFormat.payment(record.line), payment.type == .handlePayment, let order = payment.orderId {
                                state.recordedOrders[ExactID(order)] = payment.seq
                            }
                        }
                    }
                }
                try store.saveState(state)
            }
            for (projection, records) in found.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                created.append("\(directory)/\(projection.fileName): adopted \(records.count) records, going on after \(records.map(\.seq).max()!)")
            }
        }
        return created
    }
}
