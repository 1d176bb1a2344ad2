import BasketSync
import BasketSyncWire
import Glibc

/// The one-shot commands, callable from the executable and from tests.
public enum Commands {
    /// `init`: creates the sync directory, its inbox, its database and a commented configuration.
    /// Idempotent: what exists is kept. Returns what was created, one line each.
    public static func initialize(directory: String) throws(AgentError) -> [String] {
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
        _ = try Store(directory: directory, create: true)
        if isNew { created.append(database) }
        return created
    }

    /// What `push` drops into the inbox.
    public enum PushKind: Equatable, Sendable {
        /// `push sku=+2 sku=-1`: signed deltas.
        case delta
        /// `push --state sku=3`: the WebView's whole basket.
        case state
        /// `push --transfer ID sku=2`: an affiliated basket landing.
        case transfer(String)
        /// `push --redirect`: the shopper asked for the host's cart.
        case redirect
    }

    /// `push`: writes one Mealz event the Maildir way (in `inbox/tmp/`, fsync, rename into
    /// `inbox/new/`). Returns the event id.
    public static func push(directory: String, kind: PushKind, products: [RetailerProduct], id: String?) throws(AgentError) -> String {
        let tmp = "\(directory)/inbox/tmp"
        let new = "\(directory)/inbox/new"
        guard Posix.isDirectory(tmp), Posix.isDirectory(new) else {
            throw .missingInput("\(directory): not a sync directory (no inbox/tmp and inbox/new); run basket-sync init there first")
        }
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        let micros = String(Int64(time.tv_sec) * 1_000_000 + Int64(time.tv_nsec) / 1000)
        let unique = Store.newSyncId()
        let eventId = id ?? "push-\(micros)-\(unique.prefix(8))"
        let name = String(repeating: "0", count: max(0, 16 - micros.count)) + micros + ".P\(getpid())R\(unique).basket-sync"

        let event: MealzEvent
        switch kind {
        case .delta: event = .basketDelta(products)
        case .state: event = .basketState(products)
        case let .transfer(transferId): event = .basketTransfer(products, transferId: transferId)
        case .redirect: event = .redirectToCart
        }
        let bytes = EventFormat.encode(InboxEvent(id: eventId, event: event))

        let temporary = "\(tmp)/\(name)"
        do {
            let fd = try Posix.open(temporary, O_WRONLY | O_CREAT | O_EXCL, mode: Posix.sharedFileMode)
            defer { Posix.close(fd) }
            try Posix.writeAll(fd, bytes, path: temporary)
            try Posix.fsync(fd, path: temporary)
        } catch {
            _ = unlink(temporary)
            throw .system(error)
        }
        do {
            try Posix.rename(temporary, "\(new)/\(name)")
            try Posix.fsyncDirectory(new)
        } catch {
            throw .system(error)
        }
        return eventId
    }

    /// What one `sync` pass did.
    public struct SyncSummary: Equatable {
        /// What reading the cart gave.
        public var cart: SyncEngine.CartOutcome
        /// What taking the inbox did.
        public var inbox: SyncEngine.InboxSummary
    }

    /// `sync`: one pass for cron — recover the files, take the inbox, the cart (after the inbox: it
    /// may acknowledge the records the events make) and the expired windows, write the outputs,
    /// and wake a running agent.
    public static func syncOnce(directory: String, registered: Bool, logger: Logger) throws(AgentError) -> SyncSummary {
        let engine = try SyncEngine(directory: directory, registered: registered, logger: logger)
        try engine.publishAll()
        let inbox = try engine.takeInbox()
        let cart = try engine.takeCart()
        try engine.expireWindows()
        engine.signalCommit()
        return SyncSummary(cart: cart, inbox: inbox)
    }
}
