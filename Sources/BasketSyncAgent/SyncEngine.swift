import BasketSync
import BasketSyncWire
import Glibc

/// Runs the library against one sync directory: reads the cart and the inbox, runs each input in
/// one database transaction, appends the projections, and reports. Shared by `watch` (called from
/// its event loop) and the one-shot commands. Every state change goes through ``step(_:)``.
public final class SyncEngine {
    /// The sync directory.
    public let directory: String
    /// The settings from `basket-sync.json`.
    public private(set) var configuration: AgentConfiguration
    /// Whether the outbox synchronizer is registered (`--no-synchronizer` leaves it out).
    public let registered: Bool
    let store: Store
    let logger: Logger
    private var files: [Projection: JSONLinesFile] = [:]
    /// The bytes of the last cart version read (taken or rejected), to skip an unchanged one.
    private var lastCartBytes: [UInt8]?
    /// The next pending-window deadline as of this process's last step; another process's
    /// commit makes it stale until ``refreshDeadline()``.
    public private(set) var nextDeadline: Date?

    /// Opens the sync directory's database (creating it when `create`) and reads the configuration.
    public init(directory: String, registered: Bool, logger: Logger, create: Bool = false) throws(AgentError) {
        self.directory = directory
        self.registered = registered
        self.logger = logger
        configuration = try AgentConfiguration.load(directory: directory)
        store = try Store(directory: directory, create: create)
        for projection in Projection.allCases {
            files[projection] = JSONLinesFile(path: "\(directory)/\(projection.fileName)")
        }
    }

    /// Reads `basket-sync.json` again (SIGHUP); on error keeps the settings in force.
    public func reloadConfiguration() throws(AgentError) {
        configuration = try AgentConfiguration.load(directory: directory)
    }

    /// The cart's path.
    public var cartPath: String { "\(directory)/\(configuration.cart)" }

    /// The inbox folder `name` (tmp, new, cur, bad).
    public func inbox(_ name: String) -> String { "\(directory)/inbox/\(name)" }

    // MARK: The funnel

    /// Runs one input in one transaction: loads the state, runs `body` on the machine, stores the
    /// records and the state, commits, then appends the projections and reports what needs it.
    @discardableResult
    func step(
        _ body: (inout SyncStateMachine, Date) throws(AgentError) -> [SyncEffect]
    ) throws(AgentError) -> [SyncEffect] {
        let now = Date()
        let (effects, touched) = try store.withTransaction { () throws(AgentError) in
            var machine = SyncStateMachine(
                state: try store.loadState(), configuration: configuration.syncConfiguration,
                isSynchronizerRegistered: registered)
            let before = machine.state
            let effects = try body(&machine, now)
            let touched = try store.insertRecords(effects)
            for (level, message) in reports(effects) { try store.report(level: level.rawValue, message: message, at: now) }
            if machine.state != before { try store.saveState(machine.state) }
            nextDeadline = machine.nextDeadline
            return (effects, touched)
        }
        for (level, message) in reports(effects) { logger.log(level, message) }
        for projection in Projection.allCases where touched.contains(projection) { try publish(projection) }
        return effects
    }

    /// The log lines an effect deserves.
    private func reports(_ effects: [SyncEffect]) -> [(Logger.Level, String)] {
        effects.compactMap { effect in
            switch effect {
            case let .rolledBack(batch):
                return (.warning, "batch #\(batch.seq) rolled back: the host did not echo it within \(configuration.pendingTimeoutSeconds) s; write syncedThrough in the cart to be waited for")
            case let .lateEcho(seq):
                return (.warning, "the host applied batch #\(seq) after its window: Mealz does not count those units")
            case let .ignored(batch):
                return (.warning, "no synchronizer registered: ignored deltas\(batch.source.map { " from \($0)" } ?? "") (\(batch.products.count) lines)")
            case let .acknowledgementBeyondOutbox(synced, last):
                return (.error, "the cart says syncedThrough \(synced) but the outbox ends at \(last); is this cart from another sync directory?")
            case let .duplicateTransfer(transferId):
                return (.info, "transfer \(transferId) already landed: not landed again")
            case let .paymentAlreadyRecorded(orderId, seq):
                return (.info, "order \(orderId) already recorded as payment #\(seq): not recorded again")
            default:
                return nil
            }
        }
    }

    /// Catches one JSON Lines file up with the database.
    func publish(_ projection: Projection) throws(AgentError) {
        let file = files[projection]!
        let outcome = try file.catchUp { (after) throws(AgentError) in try store.lines(projection, after: after) }
        if outcome.truncatedBytes > 0 {
            logger.log(.warning, "\(file.path): cut a torn last line (\(outcome.truncatedBytes) bytes) left by a crash; its record is written again from the database")
        }
    }

    /// Catches every JSON Lines file up with the database (at start, and after another process committed).
    public func publishAll() throws(AgentError) {
        for projection in Projection.allCases { try publish(projection) }
    }

    /// Records an error for `status` and logs it.
    func reportError(_ error: AgentError) {
        logger.log(.error, error.description)
        _ = try? store.withTransaction { () throws(AgentError) in
            try store.report(level: Logger.Level.error.rawValue, message: error.description, at: Date())
        }
    }

    // MARK: Inputs

    /// What reading the cart gave.
    public enum CartOutcome: Equatable {
        /// No cart file: a missing cart is not an empty cart, nothing is sent.
        case missing
        /// The same bytes as the last version read.
        case unchanged
        /// Not valid: rejected whole, the last good cart kept.
        case rejected(AgentError)
        /// Taken: the library saw it (a notification follows when the Mealz list changed).
        case taken
    }

    /// Reads the cart and, when it changed and is valid, notifies the library.
    @discardableResult
    public func takeCart() throws(AgentError) -> CartOutcome {
        let path = cartPath
        var info = stat()
        if !configuration.followSymlinks, lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFLNK {
            let error = AgentError.badData(path: path, line: 1, column: 1, reason: "the cart is a symbolic link; set \"followSymlinks\": true in basket-sync.json to follow it")
            return rejectCart(error, bytes: [])
        }
        let bytes: [UInt8]
        do {
            guard let read = try Posix.readFile(path, limit: configuration.limits.maxFileBytes) else { return .missing }
            bytes = read
        } catch {
            if case .tooLarge = error { return rejectCart(error, bytes: []) }
            throw error
        }
        if bytes == lastCartBytes { return .unchanged }
        let cart: HostCart
        do {
            cart = try decodeCart(bytes, path: path)
        } catch {
            return rejectCart(error, bytes: bytes)
        }
        try step { (machine, now) throws(AgentError) in
            do throws(SyncInputError) {
                return try machine.retailerBasketChanged(cart.products, syncedThrough: cart.syncedThrough, at: now)
            } catch {
                throw AgentError.badData(path: path, line: 1, column: 1, reason: error.description)
            }
        }
        lastCartBytes = bytes
        return .taken
    }

    private func rejectCart(_ error: AgentError, bytes: [UInt8]) -> CartOutcome {
        if bytes != lastCartBytes || bytes.isEmpty {
            reportError(error)
        }
        lastCartBytes = bytes.isEmpty ? nil : bytes
        return .rejected(error)
    }

    /// Parses and validates a cart with the configured key names and limits.
    func decodeCart(_ bytes: [UInt8], path: String) throws(AgentError) -> HostCart {
        do { return try CartFormat.decode(bytes, keys: configuration.keys, limits: configuration.limits) } catch {
            throw error.badData(path: path, bytes: bytes)
        }
    }

    /// Parses and validates an inbox event.
    func decodeEvent(_ bytes: [UInt8], path: String) throws(AgentError) -> InboxEvent {
        do { return try EventFormat.decode(bytes, limits: configuration.limits) } catch {
            throw error.badData(path: path, bytes: bytes)
        }
    }

    /// What taking the inbox did.
    public struct InboxSummary: Equatable {
        /// Events taken for the first time.
        public var taken = 0
        /// Events whose id was already taken: acknowledged, nothing done again.
        public var duplicates = 0
        /// Malformed events moved to `inbox/bad/`.
        public var bad = 0
    }

    /// Takes every event waiting in `inbox/new/`, in name order (Maildir names sort by delivery time).
    /// Each one is committed (dedupe by id, outbox, state) and published before it is moved to
    /// `inbox/cur/`: a file leaves `new/` only once its records are durable.
    @discardableResult
    public func takeInbox() throws(AgentError) -> InboxSummary {
        var summary = InboxSummary()
        for name in Posix.listDirectory(inbox("new")) where !name.hasPrefix(".") {
            let path = "\(inbox("new"))/\(name)"
            let bytes: [UInt8]
            do {
                guard let read = try Posix.readFile(path, limit: configuration.limits.maxFileBytes) else { continue }
                bytes = read
            } catch {
                // Too large, or not a file at all: set aside, never in the way of the events behind.
                var unreadable = false
                if case .tooLarge = error { unreadable = true }
                if case let .system(failure) = error, failure.code == EISDIR { unreadable = true }
                guard unreadable else { throw error }
                try quarantine(name, error)
                summary.bad += 1
                continue
            }
            let event: InboxEvent
            do { event = try decodeEvent(bytes, path: path) } catch {
                try quarantine(name, error)
                summary.bad += 1
                continue
            }
            var duplicate = false
            do {
                try takeEvent(event, name: name, path: path, duplicate: &duplicate)
            } catch {
                guard case .badData = error else { throw error }
                try quarantine(name, error)
                summary.bad += 1
                continue
            }
            if duplicate {
                // Its records were committed before; the file must hold them before the ack.
                try publish(.outbox)
                summary.duplicates += 1
                logger.log(.info, "\(path): event \(event.id) was already taken; acknowledged without doing it again")
            } else {
                summary.taken += 1
            }
            acknowledge(name)
        }
        return summary
    }

    /// One event in one transaction: dedupe by id, the library's effects, the inbox row.
    private func takeEvent(_ event: InboxEvent, name: String, path: String, duplicate: inout Bool) throws(AgentError) {
        try step { (machine, now) throws(AgentError) in
            if try store.inboxOutcome(id: event.id) != nil {
                duplicate = true
                return []
            }
            let effects: [SyncEffect]
            do throws(SyncInputError) { effects = try machine.receive(event.event, source: event.id, at: now) } catch {
                throw AgentError.badData(path: path, line: 1, column: 1, reason: error.description)
            }
            try store.recordInbox(id: event.id, file: name, outcome: outcome(of: effects), at: now)
            return effects
        }
    }

    private func outcome(of effects: [SyncEffect]) -> String {
        for effect in effects {
            switch effect {
            case let .outbox(record): return "outbox #\(record.seq)"
            case .ignored: return "ignored: no synchronizer"
            case .duplicateTransfer: return "duplicate transfer"
            default: continue
            }
        }
        return "nothing to send"
    }

    /// Moves a taken event from `new/` to `cur/`; another process may have moved it already.
    private func acknowledge(_ name: String) {
        if rename("\(inbox("new"))/\(name)", "\(inbox("cur"))/\(name)") != 0, errno != ENOENT {
            logger.log(.warning, "\(inbox("new"))/\(name): taken, but cannot be moved to cur/ (\(String(cString: strerror(errno)))); it will be acknowledged again, not done again")
        }
    }

    /// Moves a malformed event to `inbox/bad/` with a `.error` file beside it saying why.
    private func quarantine(_ name: String, _ error: AgentError) throws(AgentError) {
        let bad = inbox("bad")
        do {
            try Posix.makeDirectory(bad, mode: 0o755)
            let message = "\(error.description)\nFix the event and deliver it again through inbox/tmp/ and inbox/new/.\n"
            try Posix.writeFileAtomically("\(bad)/\(name).error", Array(message.utf8))
            try Posix.rename("\(inbox("new"))/\(name)", "\(bad)/\(name)")
        } catch {
            if error.code == ENOENT { return }
            throw .system(error)
        }
        reportError(error)
    }

    /// Rolls back the batches whose pending window is over.
    public func expireWindows() throws(AgentError) {
        try step { (machine, now) throws(AgentError) in machine.expireWindows(at: now) }
    }

    /// Reads the next pending-window deadline again, as committed by any process.
    public func refreshDeadline() throws(AgentError) {
        nextDeadline = try store.withTransaction { () throws(AgentError) in
            SyncStateMachine(state: try store.loadState()).nextDeadline
        }
    }

    /// The state as committed now.
    public func currentState() throws(AgentError) -> SyncState {
        try store.withTransaction { () throws(AgentError) in try store.loadState() }
    }

    /// Tells a running agent that this process committed.
    public func signalCommit() { store.signalCommit() }
}
