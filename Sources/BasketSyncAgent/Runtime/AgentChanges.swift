import BasketSync
import BasketSyncWire

/// What changed, and the passes it calls for: inotify's events, the polled carts' looks, group commit.
extension Agent {
    /// Reads every waiting event and runs one pass per cart it concerns.
    func takeEvents() throws(AgentError) {
        guard let inotify else { return }
        let events: [InotifyEvent]
        do { events = try inotify.events() } catch { throw .system(error) }
        var changes: [String: (kinds: Set<Watcher.Change>, delivered: [String])] = [:]
        var order: [String] = []
        for event in events {
            if event.mask.contains(.overflow) || event.watch < 0 {
                logger.log(.warning, "the inotify queue overflowed: reading everything again")
                for cart in carts.values { cart.poller?.checkFolder() }
                for id in (try? tree?.cartDirectories()) ?? [] where carts[id] == nil { takeOn(id) }
                // Every cart, those with events already read in this wake-up too: what the queue
                // lost may be theirs.
                for cart in carts.values {
                    if changes[cart.id] == nil { order.append(cart.id) }
                    changes[cart.id, default: ([], [])].kinds.insert(.overflow)
                }
                continue
            }
            if event.mask.contains(.ignored) { continue }
            // A sync directory's events are all its one cart's (its watcher finds what each is
            // about); in a tree, the watched path says which cart, or the root's carts coming and going.
            guard let tree else {
                if let watcher = carts[Agent.directoryCart]?.watcher {
                    if changes[Agent.directoryCart] == nil { order.append(Agent.directoryCart) }
                    var entry = changes[Agent.directoryCart] ?? ([], [])
                    watcher.handle(event, into: &entry.kinds, delivered: &entry.delivered)
                    changes[Agent.directoryCart] = entry
                }
                continue
            }
            guard let watched = inotify.path(of: event.watch) else { continue }
            // Which cart, from the watched path's bytes (a trailing slash, as the library names a
            // directory, left out): the root's own events, or the first name under it.
            var path = watched.utf8[...]
            if path.last == UInt8(ascii: "/") { path = path.dropLast() }
            guard path.hasBytePrefix(tree.root.utf8) else { continue }
            let below = path.dropFirst(tree.root.utf8.count)
            if below.isEmpty {
                if !event.mask.isDisjoint(with: [.deleteSelf, .moveSelf]) {
                    fatal = .directoryGone(path: tree.root)
                    return
                }
                if event.name == Layout.stateDirectory, !event.mask.isDisjoint(with: [.delete, .movedFrom]) {
                    fatal = .directoryGone(path: tree.root)
                    return
                }
                guard Tree.isCartId(event.name) else { continue }
                if !event.mask.isDisjoint(with: [.delete, .movedFrom]) {
                    end(event.name)
                } else if !event.mask.isDisjoint(with: [.create, .movedTo]), Posix.info("\(tree.root)/\(event.name)", follow: false)?.kind == .directory {
                    // Only a directory is a cart (basket-sync.json rewritten is not one).
                    // A directory made again under the id of a cart still watched: the old one ended.
                    if carts[event.name] != nil { end(event.name) }
                    takeOn(event.name)
                }
                continue
            }
            guard below.first == UInt8(ascii: "/") else { continue }
            let id = String(decoding: below.dropFirst().prefix { $0 != UInt8(ascii: "/") }, as: UTF8.self)
            guard let cart = carts[id] else {
                if waiting[id] != nil, event.name == Layout.cartMarker, !order.contains(id) {
                    changes[id] = ([.commit], [])
                    order.append(id)
                }
                continue
            }
            guard let watcher = cart.watcher else { continue }
            if changes[id] == nil { order.append(id) }
            // Taken out while it changes: a copy left in the dictionary would be copied again.
            var entry = changes.removeValue(forKey: id) ?? ([], [])
            watcher.handle(event, watched: watched, into: &entry.kinds, delivered: &entry.delivered)
            changes[id] = entry
        }
        take(changes, order: order)
    }

    /// One look at what is polled: a tree's carts (when its root is polled), then each polled cart.
    func look() {
        var rootChanged = false
        if let tree, rootChoice.polls {
            let now = Posix.monotonicSeconds()
            let identity = Posix.info(tree.root, follow: false)?.identity
            if identity != rootIdentity { rootUnsettledUntil = now + Poller.settleSeconds }
            if identity != rootIdentity || now < rootUnsettledUntil + Double(rootChoice.intervalMs) / 1000 {
                rootChanged = true
                rootIdentity = identity
                guard Posix.info(tree.root, follow: false)?.kind == .directory, Posix.info(tree.database.stateDirectory, follow: false)?.kind == .directory else {
                    fatal = .directoryGone(path: tree.root)
                    return
                }
                let ids = Set((try? tree.cartDirectories()) ?? [])
                for id in carts.keys where !ids.contains(id) { end(id) }
                for id in ids.sorted() where carts[id] == nil && waiting[id] == nil { takeOn(id) }
            }
        }
        // One-shot commands touch the tree's commit signal after a cart's marker: while it
        // changed (and settles), every polled cart's marker is looked at; else each in its turn.
        let now = Posix.monotonicSeconds()
        var treeSignalled = true
        if let tree, let pollRoot {
            pollRoot.refresh()
            // What the root's names give may have changed: each cart's folder held is checked.
            if rootChanged { for cart in carts.values { cart.poller?.checkFolder() } }
            let signal = Posix.info(tree.database.commitSignalPath, follow: false)
            if signal != treeSignal {
                treeSignal = signal
                treeSignalUnsettledUntil = now + Poller.settleSeconds
            }
            treeSignalled = now < treeSignalUnsettledUntil
        }
        var changes: [String: (kinds: Set<Watcher.Change>, delivered: [String])] = [:]
        var order: [String] = []
        let polled = polledList ?? carts.values.filter { $0.poller != nil }.sorted { $0.id < $1.id }
        polledList = polled
        for cart in polled {
            let seen = cart.poller!.changes(onlyFresh: cart.retryAt != nil, now: now, treeSignalled: treeSignalled)
            if !seen.kinds.isEmpty {
                changes[cart.id] = seen
                order.append(cart.id)
            }
        }
        // A directory refused until init --adopt: its marker written again is looked for too.
        if let tree, rootChoice.polls {
            for id in waiting.keys {
                let identity = Posix.info("\(tree.root)/\(id)/\(Layout.cartMarker)", follow: false)?.identity
                if waitingMarkers[id] != nil, waitingMarkers[id] != identity, !order.contains(id) {
                    changes[id] = ([.commit], [])
                    order.append(id)
                }
                waitingMarkers.updateValue(identity, forKey: id)
            }
            waitingMarkers = waitingMarkers.filter { waiting[$0.key] != nil }
        }
        take(changes, order: order.sorted())
    }

    /// Runs what changed in each cart, in order: the new cart versions together (group commit).
    func take(_ changes: [String: (kinds: Set<Watcher.Change>, delivered: [String])], order: [String]) {
        var cartsOnly: [Cart] = []
        for id in order where carts[id] == nil && waiting[id] != nil { takeOn(id) }
        for id in order {
            guard let cart = carts[id], let (kinds, delivered) = changes[id] else { continue }
            if kinds.contains(.directoryGone) {
                // A sync directory gone ends the agent; a tree's cart gone ends that cart.
                guard tree != nil else {
                    fatal = .directoryGone(path: root)
                    return
                }
                end(id)
                continue
            }
            // The marker touched: still this cart's? (init --adopt, a marker overwritten or lost
            // make it another, or none.)
            if let tree, kinds.contains(.commit), case let state = tree.markerState(id, number: cart.store.cart), state != .matches {
                // Its directory gone, the marker with it: the cart ended (seen by its poller
                // before the root's listing); else another cart's now, or none.
                if Posix.info("\(tree.root)/\(id)", follow: false)?.kind != .directory { end(id) } else { takeOnAgain(id, because: state) }
                continue
            }
            var scope: SyncEngine.PassScope = []
            if kinds.contains(.overflow) { scope = [.publish, .inbox, .cart] }
            if kinds.contains(.commit) { scope.insert(.publish) }
            if kinds.contains(.inbox) { scope.insert(.inbox) }
            if kinds.contains(.cart) { scope.insert(.cart) }
            // The common case, a new cart version, is taken with the others of this wake-up.
            if scope == .cart, cart.retryAt == nil { cartsOnly.append(cart) } else if !scope.isEmpty { attempt(cart, scope, inboxSeen: delivered, reported: !kinds.contains(.overflow)) }
        }
        for group in boundedGroups(cartsOnly) {
            if SignalPipe.stopRequested { return }
            if group.count == 1 { attempt(group[0], .cart) } else { takeCarts(group) }
        }
    }

    /// The carts of one wake-up cut into groups whose cart files hold at most `maxFileBytes`
    /// together (by their sizes now; a cart over it is a group of its own), and at most half as
    /// many as the engines kept: a group's versions are all held in memory until its commit, as
    /// the inbox's groups are bounded by bytes, and its engines until its end.
    func boundedGroups(_ group: [Cart]) -> [[Cart]] {
        let bound = Int64(configuration.limits.maxFileBytes)
        var groups: [[Cart]] = []
        var current: [Cart] = []
        var bytes: Int64 = 0
        for cart in group {
            // By the cart's path, not its engine: making one for each cart of a large wake-up
            // would let go of those made for its first carts.
            let size = Posix.info("\(cart.store.directory)/\(configuration.cart)", follow: true)?.size ?? 0
            // At most half the engines kept: a group's engines are not let go before its end.
            if !current.isEmpty, bytes + size > bound || current.count >= max(1, enginesKept / 2) {
                groups.append(current)
                current = []
                bytes = 0
            }
            current.append(cart)
            bytes += size
        }
        if !current.isEmpty { groups.append(current) }
        return groups
    }

    /// Group commit: the new versions of many carts read and run in one transaction (one
    /// database fsync), each under a savepoint (a cart that fails is undone alone); then, once it
    /// committed, each cart's appends and logs.
    func takeCarts(_ group: [Cart]) {
        var reads: [(cart: Cart, engine: SyncEngine, read: SyncEngine.CartRead)] = []
        var failed: [(cart: Cart, error: AgentError)] = []
        // The group's engines are made before its transaction: making one may first end a flush
        // (the folders its lines hold open are bounded), which notes what it made durable in a
        // transaction of its own and must not hold the database's lock while it waits.
        var engaged: [(cart: Cart, engine: SyncEngine)] = []
        for cart in group {
            do throws(AgentError) { engaged.append((cart, try engine(for: cart))) } catch { failed.append((cart, error)) }
        }
        let unengaged = failed
        do throws(AgentError) {
            try database.withTransaction { () throws(AgentError) in
                reads = []
                failed = unengaged
                for (cart, engine) in engaged {
                    do throws(AgentError) {
                        reads.append((cart, engine, try database.withSavepoint { () throws(AgentError) in try engine.readCartInTransaction() }))
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
        // Each cart's appends, their notes in one transaction at the end (``HeldNotes``), then
        // what each cart does after; the lines are flushed within the flush delay, all carts'
        // together (``Agent/flushDue``).
        let held = HeldNotes()
        var outcomes: [Result<SyncEngine.CartOutcome, AgentError>] = []
        var notedThrough = 0
        /// The notes of the carts finished since the last, in one transaction.
        func note() {
            // Not noted: each cart failed as its own note would have made it (its lines are
            // written; the next catch-up reads its files' tails).
            if let error = held.finish() {
                for index in notedThrough..<outcomes.count { outcomes[index] = outcomes[index].flatMap { _ in .failure(error) } }
            }
            notedThrough = outcomes.count
        }
        for (_, engine, read) in reads {
            engine.heldNotes = held
            defer { engine.heldNotes = nil }
            do throws(AgentError) { outcomes.append(.success(try engine.finishCart(read))) } catch { outcomes.append(.failure(error)) }
            // A kill before the notes leaves them one append behind: at most this many carts'.
            if outcomes.count - notedThrough >= HeldNotes.cartsAtMost { note() }
        }
        note()
        for ((cart, engine, _), outcome) in zip(reads, outcomes) {
            switch outcome {
            case let .success(outcome):
                settle(cart, engine, outcome)
                cart.follow(engine)
                engine.retainQuietly()
            case let .failure(error):
                fail(cart, error, engine: engine)
            }
        }
        // An engine let go meanwhile (the engines kept made room for the group's later carts)
        // leaves its lines to the flush, as every engine let go does: dropped with them, it
        // would fsync them itself, on this thread.
        collectUnflushed(reads.filter { engines[$0.cart.id] !== $0.engine }.map { (key: $0.cart.id, value: $0.engine) })
        for (cart, error) in failed { fail(cart, error, engine: try? engine(for: cart)) }
    }
}
