import BasketSync
import BasketSyncWire

/// `basket-sync -C ROOT watch` on a tree: one agent for every cart of the tree (SPEC §8).
///
/// One inotify instance watches the root (carts appearing and going) and each cart as the
/// single-directory agent watches its directory (``Watcher``); one event loop runs each cart's
/// passes through that cart's ``SyncEngine``. A cart that fails (a FIFO as its cart, a
/// permission, a full disk) is retried on its own with a growing delay; the others go on.
/// Engines are made on demand and only the recently used are kept: 10,000 idle carts hold their
/// watches, their number and their next deadline, not their state.
public final class TreeAgent {
    /// One adopted cart.
    final class Cart {
        let id: String
        let store: Store
        /// inotify's watches of the cart, or the poller that looks at it (SPEC §10): one of them.
        let watcher: Watcher?
        let poller: Poller?
        /// When to try again after a failure, and the delay after that.
        var retryAt: Date? { didSet { timingChanged(self) } }
        var retryDelay = 0.5
        /// The next pending-window deadline, as its last pass left it.
        var deadline: Date? { didSet { if deadline != oldValue { timingChanged(self) } } }
        /// Tells the agent that `retryAt` or `deadline` changed.
        let timingChanged: (Cart) -> Void
        /// When it was last used (to keep the recent engines only).
        var used = 0

        init(id: String, store: Store, watcher: Watcher?, poller: Poller?, timingChanged: @escaping (Cart) -> Void) {
            self.id = id
            self.store = store
            self.watcher = watcher
            self.poller = poller
            self.timingChanged = timingChanged
        }
    }

    private let tree: Tree
    private let logger: Logger
    private let logFormat: LogFormat?
    private let isSynchronizerRegistered: Bool
    private var configuration: AgentConfiguration
    private var carts: [String: Cart] = [:]
    /// How many carts are polled, kept as carts come and go (each wake-up asks: it must not count).
    private var polledCarts = 0
    /// Whether the start is over: from then on the watch note follows the carts as they come and go.
    private var started = false
    /// Directories that could not be adopted (refused: they hold records new to the tree),
    /// watched for their marker: `init --adopt` writing it adopts them.
    private var waiting: [String: Watcher] = [:]
    /// The carts with a retry or a deadline ahead: a wake-up looks at those, not at every cart.
    private var timed: [String: Cart] = [:]
    private var engines: [String: SyncEngine] = [:]
    private var clock = 0
    private var lockFd: Int32 = -1
    private var fatal: AgentError?
    private var inotify: Inotify!
    /// fsyncs a group's files together: `BASKET_SYNC_FSYNC_THREADS` at once (1 to 64, default 8;
    /// 1: one after the other, in the agent's thread).
    private let fsyncPool = FsyncPool(width: Posix.environment("BASKET_SYNC_FSYNC_THREADS").flatMap { Int($0) }.map { max(1, min(64, $0)) } ?? 8)

    /// The engines kept between wake-ups (the most recently used carts): at most this many, fewer
    /// when the descriptor limit is low.
    static let enginesKeptAtMost = 256
    private var enginesKept = 8

    /// `--poll[=MS]`, which wins over the configuration's `watch`.
    private let watchOverride: WatchChoice.Override?
    /// How the root is seen; when it polls, every cart is polled and the root listed.
    private var rootChoice = WatchChoice(polls: false, intervalMs: 1000, reason: "")
    /// The inotify watches left for carts; past them, carts are polled.
    private var watchesLeft = Int.max
    private var looks = LookClock(intervalMs: 1000)
    /// The root's identity at the last look (a polled root is listed when it changed).
    private var rootIdentity: [Int64] = []
    private var rootUnsettledUntil = 0.0
    /// The markers of the directories refused until `init --adopt`, at the last look (polled root).
    private var waitingMarkers: [String: [Int64]] = [:]

    /// Opens the tree at `root` for watching; `watchOverride` is `--poll[=MS]`.
    public init(root: String, isSynchronizerRegistered: Bool, logFormat: LogFormat?, watchOverride: WatchChoice.Override? = nil, logger: Logger) throws(AgentError) {
        self.watchOverride = watchOverride
        tree = try Tree(root: root)
        self.logger = logger
        self.logFormat = logFormat
        self.isSynchronizerRegistered = isSynchronizerRegistered
        configuration = tree.configuration
        logger.format = logFormat ?? configuration.logFormat
    }

    /// The watches the system lets this user have: `fs.inotify.max_user_watches`, lowered by
    /// `BASKET_SYNC_MAX_WATCHES` (to leave room for other watchers).
    static func watchLimit() -> (limit: Int, system: Int) {
        let system = (try? Posix.readFile("/proc/sys/fs/inotify/max_user_watches", limit: 64, follow: true))
            .flatMap { $0 }.flatMap { Int(String(decoding: $0, as: UTF8.self).trimmingSpaces) } ?? Int.max
        let cap = Posix.environment("BASKET_SYNC_MAX_WATCHES").flatMap { Int($0) } ?? Int.max
        return (min(system, cap), system)
    }

    /// Runs until SIGTERM or SIGINT, then returns (exit 0). Throws when it cannot start or must stop.
    public func run() throws(AgentError) {
        lockFd = try Agent.takeLock(stateDirectory: tree.database.stateDirectory) { pid in
            "\(tree.root): another basket-sync watch (pid \(pid)) is already watching this tree; stop it first, or use basket-sync sync beside it"
        }
        // Each engine kept holds its JSON Lines files open: at most 3 × enginesKept descriptors.
        let descriptors = Posix.raiseDescriptorLimit()
        enginesKept = max(8, min(TreeAgent.enginesKeptAtMost, (descriptors - 64) / 4))
        let signals: SignalPipe
        do { signals = try SignalPipe(path: tree.root) } catch { throw .system(error) }
        do {
            inotify = try Inotify(path: tree.root)
            try inotify.watch(tree.root, [.create, .movedTo, .delete, .movedFrom, .deleteSelf, .moveSelf, .onlyDirectory])
        } catch {
            throw .system(error)
        }
        let ids = try tree.cartDirectories()
        let perCart = Watcher.watchCount(cart: configuration.cart, isTreeCart: true)
        let needed = 1 + ids.count * perCart
        let (limit, systemLimit) = TreeAgent.watchLimit()
        rootChoice = try WatchChoice.decide(directory: tree.root, cart: configuration.cart, settings: configuration.watch, override: watchOverride)
        looks.restart(intervalMs: rootChoice.intervalMs)
        rootIdentity = Posix.linkInfo(tree.root)?.identity ?? []
        if rootChoice.polls {
            logger.log(.info, "the tree has \(ids.count) carts, polled every \(rootChoice.intervalMs) ms (\(rootChoice.reason))")
        } else {
            logger.log(.info, "the tree has \(ids.count) carts: \(needed) inotify watches needed (\(perCart) per cart), the limit is \(limit == Int.max ? "unknown" : String(limit))")
            watchesLeft = limit == Int.max ? Int.max : limit - 1
            if needed > limit {
                logger.log(.warning, "\(tree.root): \(ids.count) carts need \(needed) inotify watches, over the limit of \(limit): the carts beyond it are polled every \(rootChoice.intervalMs) ms; \(needed <= systemLimit ? "BASKET_SYNC_MAX_WATCHES lowers the limit below the system's \(systemLimit): raise or unset it" : "raise the limit (sysctl fs.inotify.max_user_watches=\(max(needed * 2, 65536)), and in /etc/sysctl.d/ to keep it)") to watch them all")
            }
        }
        for id in try tree.removeGoneCarts() { logger.log(.info, "cart \(id): its directory is gone while the agent was down: the cart ended") }
        // Every cart as it stands: what changed while the agent was down is taken now.
        for id in ids { adopt(id) }
        if fatal == nil {
            recordWatch()
            started = true
            let polled = carts.values.filter { $0.poller != nil }.count
            logger.log(.info, "watching the tree \(tree.root) (\(carts.count) carts, \(rootChoice.polls || (polled == carts.count && polled > 0) ? "polled every \(rootChoice.intervalMs) ms" : polled == 0 ? "inotify" : "\(polled) polled every \(rootChoice.intervalMs) ms"), cart \(configuration.cart), pid \(Posix.processId)\(isSynchronizerRegistered ? "" : ", no synchronizer registered: Mealz deltas are ignored"))", evenWhenQuiet: true)
        }

        while true {
            if let fatal { throw fatal }
            let ready: [Bool]
            let polls = rootChoice.polls || polledCarts > 0
            let timeout = polls ? looks.timeout(within: waitTimeout()) : waitTimeout()
            do { ready = try Posix.waitReadable([inotify.fd, signals.fd], timeout: timeout) } catch { throw .system(error) }
            if ready[1] {
                for signal in signals.drain() {
                    switch signal {
                    case .hangup: reload()
                    case .interrupt, .terminate:
                        logger.log(.info, "stopping on signal \(signal.number)")
                        return
                    }
                }
            }
            if ready[0] { try takeEvents() }
            if polls, looks.due() { look() }
            let now = Date()
            for cart in Array(timed.values) {
                if let due = cart.retryAt {
                    if due <= now {
                        cart.retryAt = nil
                        attempt(cart, .everything)
                    }
                } else if let deadline = cart.deadline, deadline <= now {
                    attempt(cart, .expire)
                }
            }
        }
    }

    /// Reads every waiting event and runs one pass per cart it concerns.
    private func takeEvents() throws(AgentError) {
        let events: [InotifyEvent]
        do { events = try inotify.events() } catch { throw .system(error) }
        var changes: [String: (kinds: Set<Watcher.Change>, delivered: [String])] = [:]
        var order: [String] = []
        let rootPrefix = tree.root + "/"
        for event in events {
            if event.mask.contains(.overflow) || event.watch < 0 {
                logger.log(.warning, "the inotify queue overflowed: reading every cart again")
                for id in (try? tree.cartDirectories()) ?? [] where carts[id] == nil { adopt(id) }
                for cart in carts.values where changes[cart.id] == nil {
                    changes[cart.id] = ([.overflow], [])
                    order.append(cart.id)
                }
                continue
            }
            if event.mask.contains(.ignored) { continue }
            guard let watched = inotify.path(of: event.watch) else { continue }
            let path = watched.hasSuffix("/") ? String(watched.dropLast()) : watched
            if path == tree.root {
                if !event.mask.isDisjoint(with: [.deleteSelf, .moveSelf]) {
                    fatal = .directoryGone(path: tree.root)
                    return
                }
                if event.name == Store.stateDirectoryName, !event.mask.isDisjoint(with: [.delete, .movedFrom]) {
                    fatal = .directoryGone(path: tree.root)
                    return
                }
                guard Tree.isCartId(event.name) else { continue }
                if !event.mask.isDisjoint(with: [.delete, .movedFrom]) {
                    end(event.name)
                } else if !event.mask.isDisjoint(with: [.create, .movedTo]), Posix.linkInfo("\(tree.root)/\(event.name)")?.kind == .directory {
                    // Only a directory is a cart (basket-sync.json rewritten is not one).
                    // A directory made again under the id of a cart still watched: the old one ended.
                    if carts[event.name] != nil { end(event.name) }
                    adopt(event.name)
                }
                continue
            }
            guard path.hasPrefix(rootPrefix) else { continue }
            let id = String(path.dropFirst(rootPrefix.count).prefix { $0 != "/" })
            guard let cart = carts[id] else {
                if waiting[id] != nil, event.name == Tree.markerName, !order.contains(id) {
                    changes[id] = ([.commit], [])
                    order.append(id)
                }
                continue
            }
            guard let watcher = cart.watcher else { continue }
            if changes[id] == nil { order.append(id) }
            var entry = changes[id] ?? ([], [])
            watcher.handle(event, into: &entry.kinds, delivered: &entry.delivered)
            changes[id] = entry
        }
        take(changes, order: order)
    }

    /// One look at what is polled: the root's carts (when the root is polled), then each polled cart.
    private func look() {
        if rootChoice.polls {
            let now = Posix.monotonicSeconds()
            let identity = Posix.linkInfo(tree.root)?.identity ?? []
            if identity != rootIdentity { rootUnsettledUntil = now + Poller.settleSeconds }
            if identity != rootIdentity || now < rootUnsettledUntil + Double(rootChoice.intervalMs) / 1000 {
                rootIdentity = identity
                guard Posix.linkInfo(tree.root)?.kind == .directory, Posix.linkInfo(tree.database.stateDirectory)?.kind == .directory else {
                    fatal = .directoryGone(path: tree.root)
                    return
                }
                let ids = Set((try? tree.cartDirectories()) ?? [])
                for id in carts.keys where !ids.contains(id) { end(id) }
                for id in ids.sorted() where carts[id] == nil && waiting[id] == nil { adopt(id) }
            }
        }
        var changes: [String: (kinds: Set<Watcher.Change>, delivered: [String])] = [:]
        var order: [String] = []
        for (id, cart) in carts {
            guard let poller = cart.poller else { continue }
            let seen = poller.changes(onlyFresh: cart.retryAt != nil)
            if !seen.kinds.isEmpty {
                changes[id] = seen
                order.append(id)
            }
        }
        // A directory refused until init --adopt: its marker written again is looked for too.
        if rootChoice.polls {
            for id in waiting.keys {
                let identity = Posix.linkInfo("\(tree.root)/\(id)/\(Tree.markerName)")?.identity ?? []
                if waitingMarkers[id] != nil, waitingMarkers[id] != identity, !order.contains(id) {
                    changes[id] = ([.commit], [])
                    order.append(id)
                }
                waitingMarkers[id] = identity
            }
            waitingMarkers = waitingMarkers.filter { waiting[$0.key] != nil }
        }
        take(changes, order: order.sorted())
    }

    /// Runs what changed in each cart, in order: the new cart versions together (group commit).
    private func take(_ changes: [String: (kinds: Set<Watcher.Change>, delivered: [String])], order: [String]) {
        var cartsOnly: [Cart] = []
        for id in order where carts[id] == nil && waiting[id] != nil { adopt(id) }
        for id in order {
            guard let cart = carts[id], let (kinds, delivered) = changes[id] else { continue }
            // The marker touched: still this cart's? (init --adopt, a marker overwritten or lost
            // make it another, or none.)
            if kinds.contains(.commit), !tree.markerMatches(id, number: cart.store.cart) {
                readopt(id)
                continue
            }
            if kinds.contains(.directoryGone) {
                end(id)
                continue
            }
            var scope: SyncEngine.PassScope = []
            if kinds.contains(.overflow) { scope = [.publish, .inbox, .cart] }
            if kinds.contains(.commit) { scope.insert(.publish) }
            if kinds.contains(.inbox) { scope.insert(.inbox) }
            if kinds.contains(.cart) { scope.insert(.cart) }
            // The common case, a new cart version, is taken with the others of this wake-up.
            if scope == .cart, cart.retryAt == nil { cartsOnly.append(cart) } else if !scope.isEmpty { attempt(cart, scope, inboxSeen: delivered) }
        }
        if cartsOnly.count == 1 { attempt(cartsOnly[0], .cart) } else if !cartsOnly.isEmpty { takeCarts(cartsOnly) }
    }

    /// Group commit: the new versions of many carts read and run in one transaction (one
    /// database fsync), each under a savepoint (a cart that fails is undone alone); then, once it
    /// committed, each cart's appends and logs.
    private func takeCarts(_ group: [Cart]) {
        var reads: [(cart: Cart, engine: SyncEngine, read: SyncEngine.CartRead)] = []
        var failed: [(cart: Cart, error: AgentError)] = []
        do throws(AgentError) {
            try tree.database.withTransaction { () throws(AgentError) in
                reads = []
                failed = []
                for cart in group {
                    let engine = engine(for: cart)
                    do throws(AgentError) {
                        reads.append((cart, engine, try tree.database.withSavepoint { () throws(AgentError) in try engine.readCartInTransaction() }))
                    } catch {
                        failed.append((cart, error))
                    }
                }
            }
        } catch {
            // The commit itself failed: each cart is tried again alone.
            if case .databaseGone = error { fatal = error; return }
            for cart in group { attempt(cart, .cart) }
            return
        }
        // The appends of every cart first, then their fsyncs all at once (the disk takes them
        // together), then what each cart does after.
        var finished: [(cart: Cart, engine: SyncEngine)] = []
        for (cart, engine, read) in reads {
            engine.defersSync = true
            defer { engine.defersSync = false }
            do {
                _ = try engine.finishCart(read)
                finished.append((cart, engine))
            } catch {
                fail(cart, error, engine: engine)
            }
        }
        // Every engine of the group, a cart that failed after an append too: nothing is left unsynced.
        let unsynced = reads.flatMap { read in read.engine.unsyncedFiles.map { ((cart: read.cart, engine: read.engine), $0.projection, $0.fd) } }
        let failures = fsyncPool.fsyncAll(unsynced.map { ($0.2, "\($0.0.engine.directory)/\($0.1.fileName)") })
        var failedCarts = Set<String>()
        let finishedIds = Set(finished.map(\.cart.id))
        for ((entry, projection, _), failure) in zip(unsynced, failures) {
            do throws(AgentError) { try entry.engine.finishDeferredSync(projection, failure: failure) } catch {
                failedCarts.insert(entry.cart.id)
                // A cart that failed before is retried already.
                if finishedIds.contains(entry.cart.id) { fail(entry.cart, error, engine: entry.engine) }
            }
        }
        for (cart, engine) in finished where !failedCarts.contains(cart.id) {
            cart.deadline = engine.nextDeadline
            engine.retainQuietly()
        }
        for (cart, error) in failed { fail(cart, error, engine: engine(for: cart)) }
    }

    /// Adopts cart `id` (its directory exists), watches it, and runs a whole pass on it.
    private func adopt(_ id: String) {
        let directory = "\(tree.root)/\(id)"
        do throws(AgentError) {
            let store: Store
            do throws(AgentError) {
                store = try tree.cartStore(id, create: false)
            } catch {
                // Adopted, but its folders could not be made: served all the same, its passes
                // report what is wrong until it is fixed.
                guard let known = try? tree.database.withTransaction({ () throws(AgentError) in try tree.database.cart(id) }),
                      tree.markerMatches(id, number: known.number) else { throw error }
                store = Store(database: tree.database, cart: known.number, directory: directory, signalPath: "\(directory)/\(Tree.markerName)")
            }
            // Watched with inotify while watches are left and its file system lets inotify see
            // every write; polled otherwise (SPEC §10).
            let perCart = Watcher.watchCount(cart: configuration.cart, isTreeCart: true)
            var polls = rootChoice.polls || watchesLeft < perCart
            if !polls, let choice = try? WatchChoice.decide(directory: directory, cart: configuration.cart, settings: configuration.watch, override: watchOverride), choice.polls {
                polls = true
                logger.tagged(cart: id).log(.info, "polled every \(rootChoice.intervalMs) ms (\(choice.reason))")
            }
            var watcher: Watcher?
            if !polls {
                do throws(AgentError) {
                    watcher = try Watcher(directory: directory, cart: configuration.cart, inotify: inotify, isTreeCart: true)
                    if watchesLeft != Int.max { watchesLeft -= perCart }
                } catch {
                    // The watch limit reached (other watchers on the machine): polled instead.
                    guard case let .system(failure) = error, failure.isNoSpace else { throw error }
                    watchesLeft = 0
                    logger.log(.warning, "cart \(id): the inotify watch limit is reached (sysctl fs.inotify.max_user_watches): this cart and those made after it are polled every \(rootChoice.intervalMs) ms")
                }
            }
            let poller = watcher == nil ? Poller(directory: directory, cart: configuration.cart, isTreeCart: true) : nil
            let cart = Cart(id: id, store: store, watcher: watcher, poller: poller) { [unowned self] cart in
                if cart.retryAt != nil || cart.deadline != nil { self.timed[cart.id] = cart } else { self.timed[cart.id] = nil }
            }
            carts[id] = cart
            if poller != nil { polledCarts += 1 }
            if started { recordWatch() }
            waiting[id] = nil
            attempt(cart, .everything)
        } catch {
            switch error {
            case let .system(failure) where failure.isMissing:
                break  // gone again before it could be adopted
            default:
                logger.log(.error, "cart \(id): \(error.description); it is not served until that is done (the agent sees init --adopt, or the directory made again)")
                // Watched for its marker, so that init --adopt is seen.
                if waiting[id] == nil, Posix.linkInfo(directory)?.kind == .directory {
                    waiting[id] = try? Watcher(directory: directory, cart: configuration.cart, inotify: inotify, isTreeCart: true)
                }
            }
        }
    }

    /// The cart of `id` is no longer the one the agent serves (adopted again by init --adopt, its
    /// marker overwritten or lost, given back as new): forgotten, then adopted as it is now. Its
    /// watches stay: the new watcher shares them.
    private func readopt(_ id: String) {
        if carts[id]?.poller != nil { polledCarts -= 1 }
        carts[id] = nil
        engines[id] = nil
        timed[id] = nil
        logger.log(.info, "cart \(id): its marker names another cart now: adopted again")
        adopt(id)
    }

    /// Ends cart `id`: its directory is gone (or made again): its rows go, its watches too.
    private func end(_ id: String) {
        if Posix.linkInfo("\(tree.root)/\(id)")?.kind != .directory { waiting[id] = nil }
        guard let cart = carts[id] else { return }
        // Only a cart whose directory is gone (or another's now) ends: an event that only looks
        // like it (a stray name in the root) must never take a cart's history.
        if Posix.linkInfo("\(tree.root)/\(id)")?.kind == .directory, tree.markerMatches(id, number: cart.store.cart) { return }
        carts[id] = nil
        if cart.poller != nil { polledCarts -= 1 }
        if started { recordWatch() }
        timed[id] = nil
        engines[id] = nil
        cart.watcher?.removeWatches()
        do {
            try tree.database.withTransaction { () throws(AgentError) in
                if let known = try tree.database.cart(id), known.number == cart.store.cart {
                    try tree.database.removeCart(known.number)
                }
            }
            logger.log(.info, "cart \(id): its directory was removed: the cart ended")
        } catch {
            logger.log(.error, "cart \(id): ending it failed: \(error.description)")
        }
    }

    /// The engine of a cart, made on demand; only the most recently used are kept.
    private func engine(for cart: Cart) -> SyncEngine {
        clock += 1
        cart.used = clock
        if let engine = engines[cart.id] { return engine }
        if engines.count >= enginesKept {
            // The older half goes.
            let cutoff = engines.keys.compactMap { carts[$0]?.used }.sorted()[engines.count / 2]
            engines = engines.filter { (carts[$0.key]?.used ?? 0) >= cutoff }
        }
        let engine = SyncEngine(store: cart.store, configuration: configuration, isSynchronizerRegistered: isSynchronizerRegistered, logger: logger.tagged(cart: cart.id))
        engine.logsActivity = true
        engines[cart.id] = engine
        return engine
    }

    /// Runs a pass on one cart; a failure is reported and retried later for that cart alone.
    private func attempt(_ cart: Cart, _ scope: SyncEngine.PassScope, inboxSeen: [String] = []) {
        let engine = engine(for: cart)
        do {
            // A whole pass (the start, a retry) makes what is missing of the inbox first.
            if scope == .everything { try Tree.makeInbox(engine.directory) }
            try engine.pass(scope, inboxSeen: inboxSeen)
            if scope == .everything { cart.retryDelay = 0.5 }
            cart.deadline = engine.nextDeadline
        } catch {
            fail(cart, error, engine: engine)
        }
    }

    /// A failed pass of one cart: reported, and tried again later for that cart alone with a
    /// growing delay — except the tree's database gone, which stops the agent.
    private func fail(_ cart: Cart, _ error: AgentError, engine: SyncEngine) {
        if case .databaseGone = error {
            fatal = error
            return
        }
        // Not this cart any more (its rows given back, another adopted in its place): adopted again.
        if carts[cart.id] === cart, !tree.markerMatches(cart.id, number: cart.store.cart) {
            engine.logger.log(.error, error.description)
            readopt(cart.id)
            return
        }
        engine.reportError(error)
        cart.retryAt = Date().addingTimeInterval(cart.retryDelay)
        engine.logger.log(.info, "retrying in \(cart.retryDelay) s")
        cart.retryDelay = min(cart.retryDelay * 2, 30)
    }

    /// SIGHUP: the tree's settings again; on error the settings in force are kept.
    private func reload() {
        do throws(AgentError) {
            let reloaded = try AgentConfiguration.loadFile(directory: tree.root)
            guard reloaded.isTree else {
                throw .configuration(path: "\(tree.root)/\(AgentConfiguration.fileName)", line: 1, column: 1, reason: "\"layout\" is no longer \"tree\"; a tree cannot become a sync directory under a running agent")
            }
            let cartMoved = reloaded.cart != configuration.cart
            let choice = try WatchChoice.decide(directory: tree.root, cart: reloaded.cart, settings: reloaded.watch, override: watchOverride)
            configuration = reloaded
            logger.format = logFormat ?? configuration.logFormat
            engines = [:]
            logger.log(.info, "reloaded \(AgentConfiguration.fileName)")
            if choice.polls != rootChoice.polls {
                logger.log(.warning, "the new \"watch\" setting chooses \(choice.polls ? "polling" : "inotify") for the tree; the agent keeps what it chose at its start until it restarts")
            }
            if choice.intervalMs != rootChoice.intervalMs {
                // Every polled cart (the tree polled, or carts past the watch limit) looks at the new pace.
                rootChoice.intervalMs = choice.intervalMs
                looks.restart(intervalMs: rootChoice.intervalMs)
                logger.log(.info, "polled carts are looked at every \(rootChoice.intervalMs) ms from now on")
            }
            recordWatch()
            for cart in carts.values {
                if cartMoved { cart.watcher?.follow(cart: configuration.cart) }
                if cartMoved { cart.poller?.follow(cart: configuration.cart) }
                if cartMoved { attempt(cart, .cart) }
            }
        } catch {
            logger.log(.error, error.description)
            logger.log(.warning, "the settings in force are kept until \(AgentConfiguration.fileName) is fixed and SIGHUP sent again")
        }
    }

    /// How this agent sees the tree's carts, kept for `status` (with its pid: a note of an agent
    /// gone is not shown as the truth of now).
    private func recordWatch() {
        let polled = polledCarts
        let how = rootChoice.polls || (polled == carts.count && polled > 0) ? "polling every \(rootChoice.intervalMs) ms (\(rootChoice.reason))" : polled == 0 ? "inotify" 
            : "\(polled) of \(carts.count) carts polled every \(rootChoice.intervalMs) ms, the others inotify"
        _ = try? tree.database.withTransaction { () throws(AgentError) in try Store(database: tree.database, cart: 0, directory: "", signalPath: "").setNote(WatchChoice.noteKey, "\(Posix.processId)\t\(how)") }
    }

    /// Milliseconds until the next deadline or retry of any cart; -1 (wait for an event) when none.
    private func waitTimeout() -> Int32 {
        var due: Date?
        for cart in timed.values {
            guard let next = cart.retryAt ?? cart.deadline else { continue }
            if due == nil || next < due! { due = next }
        }
        guard let due else { return -1 }
        let milliseconds = (due.timeIntervalSinceNow * 1000).rounded(.up)
        return Int32(max(0, min(milliseconds, Double(Int32.max))))
    }
}
