import BasketSyncWire

/// An error of the agent or a command, with the sysexits code it exits with.
public enum AgentError: Error, CustomStringConvertible, Equatable {
    /// A system call failed.
    case system(SystemError)
    /// A file is larger than the configured limit (`size` negative: a stream stopped past the
    /// limit, its size unknown).
    case tooLarge(path: String, size: Int, limit: Int)
    /// A data file (cart, inbox event, products) is not valid: `path:line:column: reason`.
    case badData(path: String, line: Int, column: Int, reason: String)
    /// The configuration file is not valid.
    case configuration(path: String, line: Int, column: Int, reason: String)
    /// The command line is wrong.
    case usage(String)
    /// Something is busy: another agent, a locked database.
    case busy(String)
    /// An input file or directory is missing.
    case missingInput(String)
    /// The database refused an operation.
    case database(path: String, message: String)
    /// The database file was unlinked or replaced under this process: nothing more may be
    /// acknowledged; an agent stops.
    case databaseGone(path: String)
    /// A JSON Lines file holds a record the database does not: the database was lost, restored
    /// or replaced. Nothing more may be written (74); the agent stops.
    case databaseBehind(path: String, fileSeq: UInt64, databaseSeq: UInt64)
    /// The sync directory, or its `.basket-sync/`, was removed or moved away under this process.
    case directoryGone(path: String)
    /// An output cannot be made without losing or doubling something (73).
    case refused(String)
    /// What the command needs is not set up (a store, retailer mode): configuration to do first.
    case notReady(String)
    /// The input contradicts what was recorded before (a payment retry that differs): 65.
    case conflict(String)

    /// One sentence naming the file, what is wrong and what to do (a pinned folder named as
    /// people know it, never as `/proc/self/fd/N`).
    public var description: String { PinnedNames.named(text) }

    private var text: String {
        switch self {
        case let .system(error): return error.description
        case let .tooLarge(path, size, limit):
            // A negative size: read as it came (a pipe), stopped past the limit, its size unknown.
            return "\(path): \(size < 0 ? "more than \(limit) bytes" : "\(size) bytes") is over the limit of \(limit); raise limits.maxFileBytes in basket-sync.json if this is intended"
        case let .badData(path, line, column, reason): return "\(path):\(line):\(column): \(reason)"
        case let .configuration(path, line, column, reason): return "\(path):\(line):\(column): \(reason)"
        case let .usage(message): return message
        case let .busy(message): return message
        case let .missingInput(message): return message
        case let .database(path, message): return "\(path): \(message)"
        case let .directoryGone(path):
            return "\(path): the sync directory or its .basket-sync/ was removed or moved away, and the state with it; restore it, then start again"
        case let .databaseGone(path):
            return "\(path): deleted or replaced while basket-sync had the database open (or its directory was removed); nothing more is acknowledged. Restore the database's directory (\(Posix.dirname(of: path))/) from a backup, then start again"
        case let .databaseBehind(path, fileSeq, databaseSeq):
            return "\(path): holds record \(fileSeq) but the database ends at \(databaseSeq): the database was lost, restored or replaced. Nothing was written; restore .basket-sync/ from a newer backup, or move .basket-sync/ away and run basket-sync init --adopt to make it again from the files"
        case let .notReady(message): return message
        case let .refused(message): return message
        case let .conflict(message): return message
        }
    }

    /// The sysexits code: 64 usage, 65 bad data, 66 missing input, 73 cannot create output,
    /// 74 I/O error, 75 busy or temporary, 78 configuration.
    public var exitCode: Int32 {
        switch self {
        case let .system(error): return error.isTemporary ? 75 : (error.isMissing ? 66 : 73)
        case .tooLarge, .badData, .conflict: return 65
        case .configuration: return 78
        case .usage: return 64
        case .busy: return 75
        case .missingInput: return 66
        case .database, .databaseGone, .databaseBehind: return 74
        case .directoryGone: return 66
        case .notReady: return 78
        case .refused: return 73
        }
    }
}

extension DecodingFailure {
    /// The first problem as a bad-data error naming the file, the line and the column.
    func badData(path: String, bytes: [UInt8]) -> AgentError { first.badData(path: path, bytes: bytes) }

    /// Every problem as `path:line:column: reason`, in file order.
    package func descriptions(path: String, bytes: [UInt8]) -> [String] {
        problems.map { $0.badData(path: path, bytes: bytes).description }
    }
}

extension JSONProblem {
    /// This problem as a bad-data error naming the file, the line and the column.
    func badData(path: String, bytes: [UInt8]) -> AgentError {
        let (line, column) = lineAndColumn(of: offset, in: bytes)
        return .badData(path: path, line: line, column: column, reason: reason)
    }
}

extension AgentError {
    /// The same error with every pinned folder named as people know it now, while its
    /// descriptor still is that folder: an error kept to be said later (a summary at the end of
    /// `sync` on a tree's root) is named when it is kept.
    var named: AgentError {
        let n = PinnedNames.named
        switch self {
        case var .system(error):
            error.path = n(error.path)
            error.operation = n(error.operation)
            return .system(error)
        case let .tooLarge(path, size, limit): return .tooLarge(path: n(path), size: size, limit: limit)
        case let .badData(path, line, column, reason): return .badData(path: n(path), line: line, column: column, reason: n(reason))
        case let .configuration(path, line, column, reason): return .configuration(path: n(path), line: line, column: column, reason: n(reason))
        case let .usage(message): return .usage(n(message))
        case let .busy(message): return .busy(n(message))
        case let .missingInput(message): return .missingInput(n(message))
        case let .database(path, message): return .database(path: n(path), message: n(message))
        case let .databaseGone(path): return .databaseGone(path: n(path))
        case let .databaseBehind(path, fileSeq, databaseSeq): return .databaseBehind(path: n(path), fileSeq: fileSeq, databaseSeq: databaseSeq)
        case let .directoryGone(path): return .directoryGone(path: n(path))
        case let .refused(message): return .refused(n(message))
        case let .notReady(message): return .notReady(n(message))
        case let .conflict(message): return .conflict(n(message))
        }
    }

    /// The same error with a path that starts with `prefix` named from `replacement` instead
    /// (a pinned folder's /proc/self/fd path, named as the user knows it).
    func replacingPathPrefix(_ prefix: String, with replacement: String) -> AgentError {
        func renamed(_ path: String) -> String {
            // "PREFIX/./REST", a pinned folder's file, is "REPLACEMENT/REST".
            if path.hasPrefix(prefix + "/./") { return replacement + path.dropFirst(prefix.count + 2) }
            return path.hasPrefix(prefix) ? replacement + path.dropFirst(prefix.count) : path
        }
        switch self {
        case var .system(error):
            error.path = renamed(error.path)
            return .system(error)
        case let .tooLarge(path, size, limit): return .tooLarge(path: renamed(path), size: size, limit: limit)
        case let .badData(path, line, column, reason): return .badData(path: renamed(path), line: line, column: column, reason: reason)
        // A refusal starts with the path it is about.
        case let .refused(message): return .refused(renamed(message))
        default: return self
        }
    }
}
