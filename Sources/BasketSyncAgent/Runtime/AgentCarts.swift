import BasketSync
import BasketSyncWire

/// The carts served: taken on, ended, their engines, their passes and failures; SIGHUP.
extension Agent {
    /// Takes on cart `id` of the tree (its directory exists), watches it, and runs a whole pass on it.
    func takeOn(_ id: String) {
        guard let tree, let inotify else { return }
        let directory = "\(tree.root)/\(id)"
        do throws(AgentError) {
            let store: Store
            var pinned: Store?
            var inboxMade = false
            do throws(AgentError) {
                // Kept for the cart's life: its folder is held open by its engine only.
                pinned = try tree.cartStore(id, create: false)
                store = pinned!.unpinned
                inboxMade = true  // cartStore made what was missing of the inbox
            } catch {
                // Adopted, but its folders could not be made: served all the same, its passes
                // report what is wrong until it is fixed.
                guard let known = try? tree.database.withTransaction({ () throws(AgentError) in try tree.database.cart(id) }),
                      tree.markerMatches(id, number: known.number) else { throw error }
                store = Store(database: tree.database, cart: known.number, directory: directory, signalPath: "\(directory)/\(Layout.cartMarker)")
            }
            // Watched with inotify while watches are left and its file system lets inotify see
            // every write; polled otherwise (docs/spec.md §10).
            let perCart = Watcher.watchCount(cart: configuration.cart, isTreeCart: true)
            // What other programs held when a watch was refused is a guess: a new cart tries.
            let guessed = watchLimitGuess
            watchLimitGuess = nil
            var polls = rootChoice.polls || watchesLeft < perCart
            var forWant = !rootChoice.polls && polls
            if !polls, let choice = try? WatchChoice.decide(directory: directory, cart: configuration.cart, settings: configuration.watch, override: watchOverride), choice.polls {
                polls = true
                logger.tagged(cart: id).log(.info, "polled every \(rootChoice.intervalMs) ms (\(choice.reason))")
            }
            var watcher: Watcher?
            if !polls {
                do throws(AgentError) {
                    watcher = try Watcher(directory: directory, cart: configuration.cart, inotify: inotify, isTreeCart: true)
                } catch {
                    // The watch limit reached (other watchers on the machine): polled instead,
                    // the limit taken as what the agent holds now.
                    guard case let .system(failure) = error, failure.isWatchLimit else { throw error }
                    watchLimitGuess = inotify.liveWatches
                    forWant = true
                    // Said once, not again for each cart that finds the watches still taken.
                    if guessed == nil {
                        logger.log(.warning, "cart \(id): \(SystemError.watchLimitReached): this cart and those made after it are polled every \(rootChoice.intervalMs) ms, watched again as watches are given back")
                    }
                }
            }
            // Watched under a guess that said no: the carts polled for want try again.
            if watcher != nil, guessed != nil, !polledForWant.isEmpty { watchProbeAt = 0 }
            if watcher == nil, pollRoot == nil { pollRoot = PollRoot(tree.root, folders: pollFolders) }
            // With followSymlinks, a cart that may lead elsewhere is looked at as well (see startDirectory).
            if watcher != nil, configuration.followSymlinks, pollRoot == nil { pollRoot = PollRoot(tree.root, folders: pollFolders) }
            let poller = watcher == nil || configuration.followSymlinks ? Poller(directory: directory, cart: configuration.cart, isTreeCart: true, root: pollRoot) : nil
            let cart = Cart(id: id, store: store, watcher: watcher, poller: poller) { [unowned self] in self.timingChanged($0) }
            cart.inboxJustMade = inboxMade
            cart.firstPin = pinned
            takeOnRetries[id] = nil
            away[id] = nil
            serve(cart)
            if forWant, watcher == nil { polledForWant.insert(id) }
            cart.firstPin = nil
        } catch {
            switch error {
            case let .system(failure) where failure.isMissing:
                takeOnRetries[id] = nil  // gone again before it could be taken on
            case .system:
                // A reason of the moment (a permission, no space or descriptor left): tried
                // again alone, with a growing delay, until it is fixed.
                let delay = takeOnRetries[id]?.delay ?? 0.5
                takeOnRetries[id] = (Posix.monotonicSeconds() + delay, min(delay * 2, 30))
                logger.log(.error, "cart \(id): \(error.description); retrying in \(delay) s")
            default:
                takeOnRetries[id] = nil
                logger.log(.error, "cart \(id): \(error.description); it is not served until that is done (the agent sees init --adopt, or the directory made again)")
                // Watched for its marker, so that init --adopt is seen.
                if waiting[id] == nil, Posix.info(directory, follow: false)?.kind == .directory {
                    waiting[id] = try? Watcher(directory: directory, cart: configuration.cart, inotify: inotify, isTreeCart: true)
                }
            }
        }
    }

    /// Carts polled for want of watches are watched once carts that left gave theirs back (the
    /// kernel said so: `IN_IGNORED`), the oldest names first: over weeks of carts coming and
    /// going, the watches follow the carts served, never only the carts of the start. Nothing is
    /// made in the cart's directory (it may be going); what changed between its last look and
    /// its watches is taken at once.
    func watchFreedCarts() {
        guard !polledForWant.isEmpty, !rootChoice.polls, let tree, let inotify else { return }
        let perCart = Watcher.watchCount(cart: configuration.cart, isTreeCart: true)
        for id in polledForWant.sorted() {
            guard watchesLeft >= perCart else { return }
            polledForWant.remove(id)
            guard let cart = carts[id], cart.watcher == nil, tree.markerMatches(id, number: cart.store.cart) else { continue }
            // A cart whose file system inotify cannot see stays polled (not for want of watches).
            let directory = "\(tree.root)/\(id)"
            if let choice = try? WatchChoice.decide(directory: directory, cart: configuration.cart, settings: configuration.watch, override: watchOverride), choice.polls { continue }
            let watcher: Watcher
            do throws(AgentError) {
                watcher = try Watcher(directory: directory, cart: configuration.cart, inotify: inotify, isTreeCart: true)
            } catch {
                // Other programs took the watches meanwhile: polled still, the limit taken as what
                // the agent holds now.
                if case let .system(failure) = error, failure.isWatchLimit {
                    watchLimitGuess = inotify.liveWatches
                    polledForWant.insert(id)
                    return
                }
                continue
            }
            cart.watcher = watcher
            if !configuration.followSymlinks, cart.poller != nil {
                cart.poller = nil
                polledCarts -= 1
            }
            polledList = nil
            recordWatch()
            attempt(cart, [.cart, .inbox])
        }
    }

    /// How often the carts polled for want of watches try a watch again while the agent holds
    /// fewer than its limit (other programs of its user may have given theirs back).
    static let watchProbeSeconds = 10.0

    /// Tries the carts polled for want of watches again when their probe is due: the limit read
    /// again (an operator may have raised it), the guess of what other programs hold dropped —
    /// the first refusal sets it again.
    func probeWatches() {
        guard !polledForWant.isEmpty else { return }
        let now = Posix.monotonicSeconds()
        guard now >= watchProbeAt else { return }
        watchProbeAt = now + Agent.watchProbeSeconds
        if watchLimit != Int.max { watchLimit = Agent.watchLimit().limit }
        watchLimitGuess = nil
        watchFreedCarts()
    }

    /// The cart of `id` is no longer the one the agent serves (adopted by init --adopt, its
    /// marker overwritten or lost, given back as new): forgotten, then taken on as it is now —
    /// except a cart whose marker is lost: nothing is written into a directory that may be going
    /// (`rm -r` takes the marker among the first), so it waits, watched for its marker, until a
    /// command takes it on (`sync`, `init --adopt`) or the directory is made again. Its watches
    /// stay: the new watcher shares them.
    func takeOnAgain(_ id: String, because state: Tree.MarkerState) {
        let number = carts[id]?.store.cart
        forget(id)
        // Said as it is: why it is no longer served, then whether it is served again (taking it
        // on can refuse it, and says why).
        switch state {
        case .matches, .replacedInDatabase:
            logger.log(.info, "cart \(id): the tree's database holds another cart under this name now")
        case .namesAnother:
            logger.log(.warning, "cart \(id): its marker \(Layout.cartMarker) names another sync directory now")
        case .lost:
            let directory = "\(tree?.root ?? root)/\(id)"
            logger.log(.warning, "cart \(id): its marker \(Layout.cartMarker) is gone (removed, emptied, or not a regular file any more): the cart is not served until a command takes the directory on (basket-sync -C \(directory) sync; init --adopt where it holds records) or it is made again")
            if let inotify, waiting[id] == nil, Posix.info(directory, follow: false)?.kind == .directory {
                waiting[id] = try? Watcher(directory: directory, cart: configuration.cart, inotify: inotify, isTreeCart: true)
            }
            lostCarts[id] = number
            // Gone meanwhile (the marker went first of a removal seen later): ended now.
            end(id)
            return
        }
        takeOn(id)
        if carts[id] != nil { logger.log(.info, "cart \(id): taken on again as it is now") }
    }

    /// Ends cart `id`: its directory is gone (or made again): its rows go, its watches too.
    func end(_ id: String) {
        guard let tree else { return }
        var left = false
        if Posix.info("\(tree.root)/\(id)", follow: false)?.kind != .directory {
            waiting[id] = nil
            takeOnRetries[id] = nil
            // A cart not served since its marker was lost leaves with its directory.
            if carts[id] == nil, lostCarts.removeValue(forKey: id) != nil { left = true }
        }
        if let cart = carts[id] {
            // Only a cart whose directory is gone (or another's now) ends: an event that only looks
            // like it (a stray name in the root) must never take a cart's history.
            if Posix.info("\(tree.root)/\(id)", follow: false)?.kind == .directory, tree.markerMatches(id, number: cart.store.cart) { return }
            forget(id)
            if started { recordWatch() }
            cart.watcher?.removeWatches()
            left = true
        }
        guard left else { return }
        // Not served; its rows kept a while for its directory put back as it was. A directory
        // made under its id without its marker ends it when taken on (a new cart).
        do {
            let gone = try tree.removeGoneCarts([id])
            for ended in gone.ended { logger.log(.info, "cart \(ended): its directory left the tree more than \(AgentConfiguration.number(Tree.awaySeconds)) s ago: the cart ended") }
            if let left = gone.away[id] {
                logger.log(.info, "cart \(id): its directory left the tree: not served. Put back as it was (its marker with it) within \(AgentConfiguration.number(Tree.awaySeconds)) s, it is served again with its state; after that the cart ends")
                markAway(id, for: left)
            } else if !gone.ended.contains(id) {
                logger.log(.info, "cart \(id): its directory holds no marker of it now (made again, or another cart's): the cart as it was is no longer served")
            }
        } catch {
            logger.log(.error, "cart \(id): marking it away failed: \(error.description)")
        }
    }

    /// Cart `id` is away (its directory left the tree) for `seconds` more, kept on the monotonic clock.
    func markAway(_ id: String, for seconds: Double) {
        away[id] = Posix.monotonicSeconds() + seconds
    }

    /// The carts away for their time ended: their rows removed.
    func endAway() {
        guard let tree else { return }
        do {
            let now = Posix.monotonicSeconds()
            let due = away.filter { $0.value <= now }.map(\.key)
            let gone = try tree.removeGoneCarts(due)
            for id in gone.ended { logger.log(.info, "cart \(id): its directory left the tree more than \(AgentConfiguration.number(Tree.awaySeconds)) s ago: the cart ended") }
            for id in due {
                away[id] = nil
                if let left = gone.away[id] { markAway(id, for: left) }
            }
        } catch {
            logger.log(.error, "ending the carts whose directory left the tree failed: \(error.description); tried again in a minute")
            let now = Posix.monotonicSeconds()
            for (id, ends) in away where ends <= now { away[id] = now + 60 }
        }
    }

    /// The engine of a cart, made on demand; only the most recently used are kept.
    /// A tree cart's engine reaches its files through the cart's folder opened once, never
    /// through a link (docs/spec.md §7): a folder swapped for one meanwhile is this cart's error.
    func engine(for cart: Cart) throws(AgentError) -> SyncEngine {
        clock += 1
        cart.used = clock
        // Its lines are collected for the flush at the wake-up's end.
        enginesUsed.insert(cart.id)
        if let engine = engines[cart.id] { return engine }
        if engines.count >= enginesKept {
            // The older half goes.
            let cutoff = engines.keys.compactMap { carts[$0]?.used }.sorted()[engines.count / 2]
            // The engines that go leave their lines not flushed yet to the next flush.
            collectUnflushed(engines.filter { (carts[$0.key]?.used ?? 0) < cutoff })
            engines = engines.filter { (carts[$0.key]?.used ?? 0) >= cutoff }
            // Their carts' folders stay open until then: at most `heldFolders` beside the engines
            // kept (a start pass over thousands of carts would otherwise run out of descriptors).
            // Counted without a walk over the lines waiting: a kept engine's folder among them
            // counts twice, which only flushes sooner.
            if unflushed.stores.count + flushing.stores.count > heldFolders { flushEverything() }
        }
        let pinned: Store
        if let first = cart.firstPin { pinned = first } else { pinned = try cart.store.pinned() }
        cart.firstPin = nil
        let engine = SyncEngine(store: pinned, configuration: configuration, isSynchronizerRegistered: isSynchronizerRegistered, logger: tree == nil ? logger : logger.tagged(cart: cart.id))
        engine.logsActivity = true
        engine.settlesRejections = true
        engine.unsettled = cart.unsettled
        // In a tree, each cart's turn is bounded (docs/spec.md §7): one group of events; and
        // its writers' lock held by another process is waited for a moment only.
        if tree != nil {
            engine.inboxBudget = Agent.inboxBudgetPerTurn
            engine.writersLockWait = Agent.treeWritersLockWait
        }
        engines[cart.id] = engine
        return engine
    }

    /// The inbox entries a tree's cart takes per turn: one group. A cart with more gets its next
    /// turn after every other cart's wake-up work.
    static let inboxBudgetPerTurn = SyncEngine.inboxGroupSize

    /// How long the agent serving a tree waits for a cart's writers' lock that another process
    /// holds (seconds): a one-shot command's catch-up holds it for a moment; longer, the cart is
    /// tried again later and the others go on.
    static let treeWritersLockWait = 0.1

    /// Runs a pass on one cart; a failure is reported and retried later for that cart alone.
    /// `reported`: the pass comes from what the agent was told since its start, no report lost
    /// (no overflow) — when inotify watches the cart's inbox, an entry is placed by its report
    /// (``SyncEngine/takeInbox(seen:wakeup:reported:)``); else by its change time.
    func attempt(_ cart: Cart, _ scope: SyncEngine.PassScope, inboxSeen: [String] = [], reported: Bool = false) {
        let engine: SyncEngine
        do throws(AgentError) { engine = try self.engine(for: cart) } catch {
            fail(cart, error, engine: nil)
            return
        }
        do {
            // A whole pass of a tree's cart (the start, a retry) makes what is missing of the inbox first.
            if scope == .everything, tree != nil, !cart.inboxJustMade { try Tree.makeInbox(engine.store) }
            cart.inboxJustMade = false
            let summary = try engine.pass(scope, inboxSeen: inboxSeen, inboxWakeup: wakeup, inboxReported: reported && started && cart.watcher != nil)
            if scope.contains(.inbox) {
                cart.inboxLeft = summary.inbox.left + summary.inbox.held
                cart.heldAt = summary.inbox.left == 0 && summary.inbox.held > 0 ? wakeup : nil
            }
            if scope == .everything {
                cart.retryDelay = 0.5
                cart.quietDelay = 0.5
                cart.failure = nil
            }
            // A part of a pass went through while a retry waits (a fault lifted, a cart taken):
            // the whole pass is not left to the back-off, it runs now.
            if scope != .everything, let due = cart.retryAt, due > Posix.monotonicSeconds(), !cart.broughtForward {
                engine.logger.log(.info, "a pass went through: the retry is brought forward")
                cart.retryAt = Posix.monotonicSeconds()
                cart.broughtForward = true
            }
            settle(cart, engine, summary.cart)
            cart.follow(engine)
        } catch {
            cart.inboxLeft = 0  // the retry takes everything
            cart.heldAt = nil
            fail(cart, error, engine: engine)
        }
    }

    /// After a pass that read `cart`'s file (alone, or in a group's commit): a version that did
    /// not parse and has not settled yet is read again once settled, and rejected then if it
    /// is still so. A part of a pass that goes through meanwhile does not bring it forward.
    func settle(_ cart: Cart, _ engine: SyncEngine, _ outcome: SyncEngine.CartOutcome?) {
        cart.unsettled = engine.unsettled
        guard outcome == .unsettled, let unsettled = engine.unsettled else { return }
        cart.retryAt = min(cart.retryAt ?? .infinity, unsettled.since + SyncEngine.rejectionSettleSeconds)
        cart.broughtForward = true
    }

    /// A failed pass of one cart: reported, and tried again later for that cart alone with a
    /// growing delay — except what is wrong with the whole of what the agent serves, which stops
    /// it: the database gone; for a sync directory, the directory gone or its database behind its
    /// files (retrying would only add reports to a database that is wrong).
    func fail(_ cart: Cart, _ error: AgentError, engine: SyncEngine?) {
        switch error {
        case .databaseGone:
            fatal = error
            return
        case .directoryGone, .databaseBehind:
            if tree == nil {
                fatal = error
                return
            }
        default:
            break
        }
        // Not this cart any more (its rows given back, another taken on in its place): taken on again.
        let logger = engine?.logger ?? (tree == nil ? logger : logger.tagged(cart: cart.id))
        // The failure a waiting retry is for, again (events on a cart whose inbox is broken):
        // said once per back-off step, never a log line per wake-up.
        let now = Posix.monotonicSeconds()
        let busy = if case .busy = error { true } else { false }
        if cart.failure == error.description, now < cart.quietUntil {
            cart.retryAt = busy ? now + cart.retryDelay : cart.quietUntil
            return
        }
        cart.failure = error.description
        if let tree, carts[cart.id] === cart, case let state = tree.markerState(cart.id, number: cart.store.cart), state != .matches {
            logger.log(.error, error.description)
            takeOnAgain(cart.id, because: state)
            return
        }
        if let engine { engine.reportError(error) } else {
            // No engine (its folder could not be opened): kept for status all the same.
            logger.log(.error, error.description)
            _ = try? cart.store.withTransaction { () throws(AgentError) in
                try cart.store.report(level: Logger.Level.error.rawValue, message: error.description, at: Date())
            }
        }
        cart.retryAt = now + cart.retryDelay
        cart.quietUntil = now + cart.quietDelay
        cart.broughtForward = false
        logger.log(.info, busy ? "retrying every \(cart.retryDelay) s at most, said again in \(cart.quietDelay) s" : "retrying in \(cart.retryDelay) s")
        // A cart busy for another process (its writers' lock held) is tried again within 2 s:
        // its records are committed, and `wait` already lists them. It is said as seldom as any
        // other failure (the quiet delay grows to 30 s), not at each try.
        cart.retryDelay = min(cart.retryDelay * 2, busy ? 2 : 30)
        cart.quietDelay = min(cart.quietDelay * 2, 30)
    }

    /// SIGHUP: the settings again; on error the settings in force are kept.
    func reload() {
        do throws(AgentError) {
            let reloaded = try AgentConfiguration.loadFile(directory: root)
            // What the directory is cannot change under a running agent, either way.
            guard reloaded.isTree == (tree != nil) else {
                throw AgentConfiguration.settingError(directory: root, setting: "layout", reason: tree != nil
                    ? "\"layout\" is no longer \"tree\"; a tree cannot become a sync directory under a running agent"
                    : "\"layout\" is now \"tree\"; a sync directory cannot become a tree under a running agent (its database is a single directory's)")
            }
            // Nor where its database is: the agent has it open, and one-shot commands would find
            // another.
            guard reloaded.database == configuration.database else {
                throw AgentConfiguration.settingError(directory: root, setting: "database",
                                                         reason: "\"database\" changed; the database cannot move under a running agent: stop the agent, move the database's directory, then start it again")
            }
            let cartMoved = reloaded.cart != configuration.cart
            // Read under other keys, limits or links: every cart is read again now, not at its
            // next change (a cart rejected under the old settings may be good under the new).
            let readingChanged = CartReader.readingHash(reloaded) != CartReader.readingHash(configuration)
            let choice = try WatchChoice.decide(directory: root, cart: reloaded.cart, settings: reloaded.watch, override: watchOverride)
            configuration = reloaded
            for engine in engines.values { engine.configuration = reloaded }
            logger.format = logFormat ?? configuration.logFormat
            logger.log(.info, "reloaded \(AgentConfiguration.fileName)")
            if choice.polls != rootChoice.polls {
                logger.log(.warning, "the new \"watch\" setting chooses \(choice.polls ? "polling" : "inotify"); the agent keeps what it chose at its start until it restarts")
            }
            if choice.intervalMs != rootChoice.intervalMs {
                // Every polled cart (all of them when the root is polled, or carts past the watch limit) looks at the new pace.
                rootChoice.intervalMs = choice.intervalMs
                looks.restart(intervalMs: rootChoice.intervalMs)
                if polledCarts > 0 { logger.log(.info, "polled carts are looked at every \(rootChoice.intervalMs) ms from now on") }
            }
            recordWatch()
            if cartMoved { logger.log(.info, "the cart is now \(configuration.cart)") }
            for cart in carts.values where cartMoved || readingChanged {
                if cartMoved {
                    cart.watcher?.follow(cart: configuration.cart)
                    cart.poller?.follow(cart: configuration.cart)
                }
                attempt(cart, .cart)
            }
        } catch {
            // A sync directory keeps the error for status, as its passes' errors.
            if tree == nil, let engine = engines[Agent.directoryCart] { engine.reportError(error) } else { logger.log(.error, error.description) }
            logger.log(.warning, "the settings in force are kept until \(AgentConfiguration.fileName) is fixed and SIGHUP sent again")
        }
    }

    /// How this agent sees its carts, kept for `status` (with its pid: a note of an agent gone is
    /// not shown as the truth of now).
    func recordWatch() {
        _ = try? database.withTransaction { () throws(AgentError) in try database.rootRows.setNote(.watch, "\(Posix.processId)\t\(watchDescription)") }
    }

    /// How the carts are seen, for the log and `status`: inotify, polling, or some of each — and,
    /// with "followSymlinks", that a watched cart is looked at every interval as well (a link may
    /// lead to a file whose writes inotify does not see in the directory).
    var watchDescription: String {
        // With followSymlinks every cart has a poller; those polled alone have no watcher.
        let polled = configuration.followSymlinks ? carts.values.reduce(0) { $0 + ($1.watcher == nil ? 1 : 0) } : polledCarts
        let watched = carts.count - polled
        let also = configuration.followSymlinks && !rootChoice.polls && (tree == nil || watched > 0)
            ? ", \(tree == nil ? "the cart" : "the watched carts") also looked at every \(rootChoice.intervalMs) ms (\"followSymlinks\": a link may lead to a file inotify does not see here)" : ""
        guard tree != nil else { return rootChoice.description + also }
        if rootChoice.polls || (polled == carts.count && polled > 0) { return "polling every \(rootChoice.intervalMs) ms (\(rootChoice.reason))" }
        return (polled == 0 ? "inotify" : "\(polled) of \(carts.count) carts polled every \(rootChoice.intervalMs) ms, the others inotify") + also
    }
}
