import BasketSync
import BasketSyncWire

/// `basket-sync watch`: the agent, one event loop over the carts of what it serves.
///
/// A sync directory is a tree of one cart — the directory itself; a tree's root (docs/spec.md §8)
/// has a cart per subdirectory, taken on as they appear. One inotify instance watches each cart's
/// directories (``Watcher``), and a tree's root for carts coming and going; a cart inotify cannot
/// see is polled (``Poller``). The loop waits on inotify and the signal pipe with the timeout of
/// the next pending-window deadline or retry: idle, it waits with no timeout at all. Each cart's
/// passes run through its ``SyncEngine``; the new cart versions of one wake-up are taken together
/// (group commit, one database fsync; the files flushed later, every cart's together). A cart that fails
/// (a FIFO as its cart, a permission, a full disk) is retried on its own with a growing delay; the
/// others go on. Engines are made on demand and only the recently used are kept: 10,000 idle carts
/// hold their watches, their number and their next deadline, not their state.
public final class Agent {
    /// One cart served.
    final class Cart {
        let id: String
        let store: Store
        /// inotify's watches of the cart, or the poller that looks at it (docs/spec.md §10): one of them.
        var watcher: Watcher?
        var poller: Poller?
        /// When to try again after a failure (monotonic seconds: a step of the wall clock moves
        /// no wait of the agent), and the delay after that.
        var retryAt: Double? { didSet { timingChanged(self) } }
        var retryDelay = 0.5
        /// The cart's store with its folder as taking the cart on opened it, handed to the
        /// cart's first engine (made at once, by its first pass) rather than opened again.
        var firstPin: Store?
        /// The failure its retry waits on, and until when: the same one again meanwhile (a
        /// wake-up's part of a pass, a retry brought forward) is neither logged nor kept again,
        /// and the retry stays where the back-off put it.
        var failure: String?
        var quietUntil = 0.0
        /// How long the next failure said keeps the same one quiet: the back-off's own delay,
        /// but a busy cart, tried again every 2 s at most, is said as seldom as any other failure.
        var quietDelay = 0.5
        /// Whether a pass that went through brought this back-off step's retry forward already
        /// (once per step: a cart changing all the time on a broken inbox logs nothing more).
        var broughtForward = false
        /// The cart version that did not parse, waiting to settle (kept here: engines come and go).
        var unsettled: (identity: FileIdentity, since: Double)?
        /// The next pending-window deadline, as its last pass left it (monotonic seconds).
        var deadline: Double? { didSet { if deadline != oldValue { timingChanged(self) } } }

        /// Sets ``deadline`` from the engine's, on the boot clock (never through the wall clock
        /// read now: a step of it since the pass would move the timer by the step).
        func follow(_ engine: SyncEngine) {
            let next = engine.nextDeadlineOnBootClock.map { Posix.monotonicSeconds() + ($0 - Posix.bootSeconds()) }
            // Within a millisecond it is the same deadline (read at another instant).
            if let next, let deadline, abs(next - deadline) < 0.001 { return }
            deadline = next
        }
        /// Tells the agent that `retryAt`, `deadline` or whether inbox entries are left changed.
        let timingChanged: (Cart) -> Void
        /// When it was last used (to keep the recent engines only).
        var used = 0
        /// Inbox entries its last pass left waiting (its budget spent, or not placed yet): taken
        /// on the next turn.
        var inboxLeft = 0 { didSet { if (inboxLeft > 0) != (oldValue > 0) { timingChanged(self) } } }
        /// The wake-up whose pass held inbox entries not placed yet, none being left otherwise:
        /// its next turn comes with the next wake-up, which reads the reports queued meanwhile.
        var heldAt: Int?
        /// Its inbox folders were just made (taken on): its first whole pass need not make them.
        var inboxJustMade = false

        init(id: String, store: Store, watcher: Watcher?, poller: Poller?, timingChanged: @escaping (Cart) -> Void) {
            self.id = id
            self.store = store
            self.watcher = watcher
            self.poller = poller
            self.timingChanged = timingChanged
        }
    }

    /// The directory served: the sync directory, or the tree's root.
    let root: String
    /// The tree, when the agent serves one; nil for a sync directory, whose one cart is itself.
    let tree: Tree?
    /// The database of every cart.
    let database: Database
    let logger: Logger
    let logFormat: LogFormat?
    let isSynchronizerRegistered: Bool
    var configuration: AgentConfiguration
    var carts: [String: Cart] = [:]
    /// How many carts are polled, kept as carts come and go (each wake-up asks: it must not count).
    var polledCarts = 0
    /// The polled carts, in the order the looks take them: made again when carts come or go.
    var polledList: [Cart]?
    /// Whether the start is over: from then on the watch note follows the carts as they come and go.
    var started = false
    /// When the heartbeat note was last written (monotonic seconds).
    var lastBeat = -Double.infinity
    /// When the last pass with no cart left failing went through.
    var lastWholePass: Date?
    /// When the metrics file was last written (monotonic seconds), and whether that failed.
    var lastMetrics = -Double.infinity
    var metricsFailing = false
    /// The metrics text last written, for the file's last write as the agent stops.
    var lastMetricsText: String?
    /// How long the last metrics write took, in seconds.
    var metricsCost = 0.0
    /// A pass went through since the heartbeat note, or the metrics file, was last written: each
    /// is written once its interval is over (a second; five, or ten times what the last write
    /// took), woken for it if nothing else comes — never left as it was before the last pass.
    var beatOwed = false
    var metricsOwed = false
    /// How long the metrics file waits after its last write before the next.
    var metricsInterval: Double { max(5, 10 * metricsCost) }
    /// A tree's directories that could not be taken on (refused: they hold records new to the
    /// tree), watched for their marker: `init --adopt` writing it has them served.
    var waiting: [String: Watcher] = [:]
    /// Among them, the carts served until their marker was lost, with their numbers: their
    /// rows go when their directory goes.
    var lostCarts: [String: Int64] = [:]
    /// The carts with a retry or a deadline ahead: a wake-up looks at those, not at every cart.
    var timed: [String: Cart] = [:]
    /// A tree's directories whose taking on failed for a reason of the moment (a permission, no
    /// space or descriptor left): when to try again, and the delay after that (0.5 s doubling
    /// up to 30 s).
    var takeOnRetries: [String: (at: Double, delay: Double)] = [:]
    /// A tree's carts whose directory left the tree, not served, with when they end (their
    /// rows removed) unless put back as they were, on the monotonic clock (a step of the wall
    /// clock moves nothing).
    var away: [String: Double] = [:]
    /// The carts with inbox entries left for their next turn: a wake-up looks at those, not at
    /// every cart.
    var inboxWaiting: [String: Cart] = [:]
    /// The agent's wake-ups, counted: each reads every report inotify queued before it (a
    /// delivery's report is queued before its rename returns).
    var wakeup = 0
    var engines: [String: SyncEngine] = [:]
    /// The carts whose engine was used since the lines not flushed yet were last collected: a
    /// wake-up collects theirs, not every kept engine's.
    var enginesUsed = Set<String>()
    var clock = 0
    var lockFd: Int32 = -1
    /// An error the agent must stop on.
    var fatal: AgentError?
    /// The process's one inotify instance (none for a sync directory that is polled).
    var inotify: Inotify?
    /// Flushes the lines off the loop's thread (nil: in it).
    lazy var flusher = BackgroundFlusher()
    /// The lines not flushed yet, of any cart (an engine that goes leaves its own here).
    var unflushed = FlushTogether()
    /// When their flush is due (monotonic seconds).
    var flushDue: Double?
    /// The flush under way.
    var flushing = FlushTogether()

    /// The engines kept between wake-ups (the most recently used carts): at most this many, fewer
    /// when the descriptor limit is low.
    static let enginesKeptAtMost = 256
    var enginesKept = 8
    /// The carts whose lines wait for their flush without an engine kept, each holding its
    /// folder open: past this many, the agent flushes before it makes another engine (a wait
    /// for the disk on the loop). Half the descriptors the engines leave, at least half as many
    /// as the engines kept, at most ``heldFoldersAtMost``.
    var heldFolders = 4
    static let heldFoldersAtMost = 8192

    /// `--poll[=MS]`, which wins over the configuration's `watch`.
    let watchOverride: WatchChoice.Override?
    /// How the root is seen; when it polls, every cart is polled (and a tree's root listed).
    var rootChoice = WatchChoice(polls: false, intervalMs: 1000, reason: "")
    /// The inotify watches this agent may hold (Int.max: no limit known): the system's limit,
    /// or `BASKET_SYNC_MAX_WATCHES`.
    var watchLimit = Int.max
    /// What the agent held when the kernel refused a watch under ``watchLimit`` (other programs
    /// of its user hold the rest): a guess, dropped when a cart comes and at the next probe
    /// (``probeWatches()``) — other programs give theirs back without a word.
    var watchLimitGuess: Int?
    /// When the carts polled for want of watches are tried again (monotonic seconds).
    var watchProbeAt = 0.0
    /// The inotify watches left for carts, by what the agent holds now (a cart that leaves gives
    /// its watches back); past them, carts are polled.
    var watchesLeft: Int {
        let limit = min(watchLimit, watchLimitGuess ?? Int.max)
        guard limit != Int.max, let inotify else { return Int.max }
        return max(0, limit - inotify.liveWatches)
    }
    /// The carts polled for want of watches (not for their file system): watched as soon as
    /// watches are free again (see ``watchFreedCarts()``).
    var polledForWant = Set<String>()
    var looks = LookClock(intervalMs: 1000)
    /// A tree root's identity at the last look (a polled root is listed when it changed).
    var rootIdentity: FileIdentity?
    var rootUnsettledUntil = 0.0
    /// A tree's root opened once, where its polled carts' looks start (made with the first).
    var pollRoot: PollRoot?
    /// How many polled carts' folders may be held open (``PollRoot``): what the engines and the
    /// folders waiting for their flush leave of the descriptors, less a reserve.
    var pollFolders = 0
    /// The tree's commit signal at the last look, and until when it is taken as changed.
    var treeSignal: FileInfo?
    var treeSignalUnsettledUntil = 0.0
    /// The markers of the directories refused until `init --adopt`, at the last look (polled root).
    var waitingMarkers: [String: FileIdentity?] = [:]

    /// The id of a sync directory's one cart.
    static let directoryCart = ""

    /// Opens what `directory` is — a sync directory or a tree's root — for watching;
    /// `isSynchronizerRegistered: false` is `--no-synchronizer`, `watchOverride` is `--poll[=MS]`.
    /// A cart of a tree is refused: the tree's agent serves it.
    public init(directory: String, isSynchronizerRegistered: Bool, logFormat: LogFormat?, watchOverride: WatchChoice.Override? = nil, logger: Logger) throws(AgentError) {
        self.logger = logger
        self.logFormat = logFormat
        self.watchOverride = watchOverride
        self.isSynchronizerRegistered = isSynchronizerRegistered
        root = directory
        switch Workspace.of(directory) {
        case let .treeCart(root, id):
            throw .busy("\(directory): is cart \(id) of the tree \(root), which one agent serves whole: run basket-sync -C \(root) watch (an agent of one cart inside a tree is refused)")
        case .treeRoot:
            let tree = try Tree(root: directory)
            self.tree = tree
            database = tree.database
            configuration = tree.configuration
        case .directory:
            let engine = try SyncEngine(directory: directory, isSynchronizerRegistered: isSynchronizerRegistered, logger: logger)
            // A person following the agent sees one line per record it makes.
            engine.logsActivity = true
            engine.settlesRejections = true
            tree = nil
            database = engine.store.database
            configuration = engine.configuration
            engines[Agent.directoryCart] = engine
        }
        logger.format = logFormat ?? configuration.logFormat
    }

    /// Takes `agent.lock` in `stateDirectory` without waiting, and writes the pid in it; when
    /// another process holds it, throws `.busy` with `message(pid of the holder)`.
    static func takeLock(stateDirectory: String, message: (String) -> String) throws(AgentError) -> Int32 {
        let path = "\(stateDirectory)/\(Layout.agentLock)"
        let fd: Int32
        let locked: Bool
        do {
            fd = try Posix.open(path, [.readWrite, .create], mode: 0o600)
            locked = try Posix.lockExclusive(fd, wait: false, path: path)
        } catch {
            throw .system(error)
        }
        guard locked else {
            let holder = (try? Posix.read(fd, at: 0, count: 31, path: path)) ?? []
            let pid = String(decoding: holder, as: UTF8.self).filter(\.isNumber)
            Posix.close(fd)
            throw .busy(message(pid.isEmpty ? "unknown" : pid))
        }
        // The pid is a courtesy for the message above: a lock file that cannot hold it still locks.
        try? Posix.truncate(fd, to: 0, path: path)
        try? Posix.writeAll(fd, Array("\(Posix.processId)\n".utf8), at: 0, path: path)
        return fd
    }

    /// Refuses (75) to make a database for `directory` while an agent serves it: that agent
    /// goes on with the database it started with (`"database"` changed under it is taken only at
    /// its start), and a second one beside it would be a second history — the same seqs again,
    /// a delta applied by neither.
    static func refuseNewDatabaseBesideAnAgent(_ directory: String) throws(AgentError) {
        let lock = "\(directory)/\(Layout.stateDirectory)/\(Layout.agentLock)"
        guard let pid = Posix.lockHolders(lock).first(where: { $0 != Posix.processId }) else { return }
        throw .busy("\(directory): an agent (pid \(pid)) serves it with the database it started with; a new database beside it would be a second history (the same seqs again). Stop the agent first — if basket-sync.json's \"database\" was changed under it, that agent still uses the old place until restarted — then run this again; nothing was made")
    }

    /// The watches the system lets this user have: `fs.inotify.max_user_watches` — or, in a
    /// user namespace (a container), its own `user.max_inotify_watches` when lower — lowered by
    /// `BASKET_SYNC_MAX_WATCHES` (to leave room for other watchers).
    static func watchLimit() -> (limit: Int, system: Int) {
        func read(_ path: String) -> Int {
            (try? Posix.readFile(path, limit: 64, follow: true)).flatMap { $0 }.flatMap { Int(String(decoding: $0, as: UTF8.self).trimmingSpaces) } ?? Int.max
        }
        let system = min(read("/proc/sys/fs/inotify/max_user_watches"), read("/proc/sys/user/max_inotify_watches"))
        let cap = Posix.environment("BASKET_SYNC_MAX_WATCHES").flatMap { Int($0) } ?? Int.max
        return (min(system, cap), system)
    }

    /// Runs until SIGTERM or SIGINT, then returns (exit 0). Throws when it cannot start or must stop.
    public func run() throws(AgentError) {
        lockFd = try Agent.takeLock(stateDirectory: database.markerDirectory) { pid in
            "\(root): another basket-sync watch (pid \(pid)) is already watching this \(tree == nil ? "directory" : "tree"); stop it first, or use basket-sync sync beside it"
        }
        // Each engine kept holds its JSON Lines files and its cart's folder open (4 descriptors),
        // and the carts of engines gone hold their folders until their lines are flushed: under
        // a tight limit at most half as many as the engines (4.5 × enginesKept descriptors in
        // all); under a roomy one, half of what the engines leave, so that a load over many
        // carts does not wait for the disk every few hundred changes.
        let descriptors = Posix.raiseDescriptorLimit()
        enginesKept = max(8, min(Agent.enginesKeptAtMost, (descriptors - 64) * 2 / 9))
        heldFolders = max(enginesKept / 2, min(Agent.heldFoldersAtMost, (descriptors - 64 - 4 * enginesKept) / 2))
        pollFolders = max(0, descriptors - 64 - 4 * enginesKept - heldFolders - 256)
        let signals: SignalPipe
        let abrupt = logger.prebuiltWarning("stopping on signal: the step in hand did not end within a second; it is left as a killed process leaves it (nothing is acknowledged before it is durable), and the next start takes it up")
        SignalPipe.setAbruptStopLine(abrupt.line, fd: abrupt.fd)
        do { signals = try SignalPipe(path: root) } catch { throw .system(error) }
        // Every cart as it stands: what was written before the watches were in place is taken now.
        if let tree { try startTree(tree) } else { try startDirectory() }
        // Said once the start pass is over: from here on the agent reads only what inotify reports,
        // so a host (or a test) that waits for this line never races the start pass.
        if fatal == nil {
            recordWatch()
            started = true
            logger.log(.info, startLine(), evenWhenQuiet: true)
            if let warning = database.placeWarning { logger.log(.warning, warning) }
            if let problem = Agent.heartbeatSetting.problem { logger.log(.warning, problem) }
            // systemd (Type=notify): ready once the start pass is over.
            SystemdNotify.send("READY=1\nSTATUS=\(startLine())")
        }

        beat(passed: true)
        while true {
            if let fatal {
                flushEverything()
                lastMetricsOnStop()
                throw fatal
            }
            let ready: [Bool]
            let polls = rootChoice.polls || polledCarts > 0
            // A cart with entries left waits for nothing: its next turn comes at once.
            let busy = !inboxWaiting.isEmpty
            var timeout = busy ? 0 : polls ? looks.timeout(within: waitTimeout()) : waitTimeout()
            // The heartbeat: the one wake-up of an idle agent (once a minute); sooner when a
            // pass left the note or the metrics file to write.
            var beatAt = lastBeat + Agent.heartbeatSeconds
            if beatOwed { beatAt = min(beatAt, lastBeat + 1) }
            if metricsOwed, configuration.metrics != nil { beatAt = min(beatAt, lastMetrics + metricsInterval) }
            let untilBeat = Int32(max(0, ((beatAt - Posix.monotonicSeconds()) * 1000).rounded(.up)))
            timeout = timeout < 0 ? untilBeat : min(timeout, untilBeat)
            let untilFlush = flushTimeout()
            if untilFlush >= 0 { timeout = timeout < 0 ? untilFlush : min(timeout, untilFlush) }
            do { ready = try Posix.waitReadable([inotify?.fd ?? -1, signals.fd, flusher?.fd ?? -1], timeout: timeout) } catch { throw .system(error) }
            wakeup += 1
            if ready[2] { endFlush() }
            if ready[1] {
                for signal in signals.drain() {
                    switch signal {
                    case .hangup: reload()
                    case .interrupt, .terminate:
                        logger.log(.info, "stopping on signal \(signal.number)")
                        SystemdNotify.send("STOPPING=1")
                        flushEverything()
                        lastMetricsOnStop()
                        return
                    }
                }
            }
            if ready[0] {
                try takeEvents()
                watchFreedCarts()
            }
            // The carts whose budget was spent, one more turn each, in the order they were left.
            for cart in Array(inboxWaiting.values) where carts[cart.id] === cart && cart.inboxLeft > 0 && cart.heldAt != wakeup {
                if SignalPipe.stopRequested { break }
                attempt(cart, [.inbox], reported: true)
            }
            if polls, looks.due() { look() }
            probeWatches()
            let now = Posix.monotonicSeconds()
            for cart in Array(timed.values) {
                if let due = cart.retryAt {
                    if due <= now {
                        cart.retryAt = nil
                        attempt(cart, .everything)
                    }
                } else if let deadline = cart.deadline, deadline <= now {
                    // The cart first: a version written inside a window and not taken yet (its
                    // event not read yet, its look not due) echoes it in time; only then are
                    // the windows over rolled back.
                    attempt(cart, [.cart, .expire])
                }
            }
            for (id, retry) in takeOnRetries where retry.at <= now {
                if carts[id] == nil { takeOn(id) } else { takeOnRetries[id] = nil }
            }
            if let first = away.values.min(), first <= Posix.monotonicSeconds() { endAway() }
            flushIfDue()
            beat(passed: ready[0] || busy)
        }
    }

    /// The metrics file's last write as the agent stops: no agent up (a killed agent leaves its
    /// last file as it was; its age, node_exporter's `node_textfile_mtime_seconds`, tells).
    /// The last text written is rewritten (``Metrics/stopped(_:)``), not made again: a stop has a
    /// second, and a large tree takes longer to sum up.
    func lastMetricsOnStop() {
        guard let metrics = configuration.metrics, let text = lastMetricsText else { return }
        try? Metrics.write(Metrics.stopped(text), directory: root, to: metrics, configuration: configuration)
    }

    /// Writes the metrics file (docs/spec.md §12); a failure is logged once until it works again.
    func writeMetrics(_ path: String, at now: Double) {
        lastMetrics = now
        do throws(AgentError) {
            lastMetricsText = try Metrics.write(directory: root, to: path, configuration: configuration)
            metricsCost = Posix.monotonicSeconds() - now
            metricsFailing = false
        } catch {
            // A folder read-only to the agent alone (systemd's ProtectSystem=) says how to open it.
            let systemd = error.description.contains("read-only") ? " (or, under systemd, a unit with ProtectSystem= needs the file's folder in ReadWritePaths=)" : ""
            if !metricsFailing { logger.log(.warning, "metrics: \(error.description)\(systemd); the agent goes on, and tries again with its next heartbeat") }
            metricsFailing = true
        }
    }

    /// How often an idle agent says it is alive: once a minute, or half the systemd watchdog's
    /// interval when that is shorter (`BASKET_SYNC_HEARTBEAT_SECONDS` for tests).
    static let heartbeatSeconds: Double = {
        let chosen = heartbeatSetting.seconds
        return SystemdNotify.watchdogSeconds.map { min(chosen, max(0.05, $0 / 2)) } ?? chosen
    }()

    /// `BASKET_SYNC_HEARTBEAT_SECONDS` read: seconds from 0.05 to 3600; anything else is said
    /// (at the agent's start) and the default, 60, kept.
    static let heartbeatSetting: (seconds: Double, problem: String?) = {
        guard let text = Posix.environment("BASKET_SYNC_HEARTBEAT_SECONDS") else { return (60, nil) }
        guard let value = Double(text), value.isFinite, (0.05...3600).contains(value) else {
            return (60, "BASKET_SYNC_HEARTBEAT_SECONDS=\(JSONWriter.printable(text)) ignored: give seconds from 0.05 to 3600; the heartbeat is every 60 s")
        }
        return (value, nil)
    }()

    /// Writes the heartbeat note when one is due: a heartbeat's time has come, or work went
    /// through and the last note is a second old. Its failure is not the agent's (a database
    /// busy a moment): the next one tries again.
    func beat(passed: Bool) {
        let now = Posix.monotonicSeconds()
        if passed {
            // Every cart with a retry ahead is among the timed ones.
            lastWholePass = fatal == nil && !timed.values.contains { $0.retryAt != nil } ? Date() : lastWholePass
            beatOwed = true
            metricsOwed = true
        }
        // After passes, at most every 5 s — and never more than a tenth of the time: a tree of
        // many carts takes a while to sum up; with each heartbeat whatever happened.
        let idle = now - lastBeat >= Agent.heartbeatSeconds
        defer {
            if let metrics = configuration.metrics, idle || (metricsOwed && now - lastMetrics >= metricsInterval) {
                metricsOwed = false
                writeMetrics(metrics, at: now)
            }
        }
        guard idle || (beatOwed && now - lastBeat >= 1) else { return }
        beatOwed = false
        lastBeat = now
        // The systemd watchdog is pinged with the heartbeat: an agent stuck in a step is restarted.
        SystemdNotify.send("WATCHDOG=1")
        // With the boot clock and the boot: its age is judged on a clock no step moves.
        let note = "\(Timestamp.text(Date()))\t\(Posix.processId)\t\(lastWholePass.map(Timestamp.text) ?? "")\t\(AgentConfiguration.number(Agent.heartbeatSeconds))\t\(Posix.bootSeconds())\t\(Posix.bootId)"
        // Without an fsync of its own (the next commit makes it durable): a power cut that takes
        // it back took the agent too, and a sync on every beat would hold up the change after it.
        // Not written (the database busy a moment): owed again, tried within a second.
        do { try database.rootRows.withQuickTransaction { () throws(AgentError) in try database.rootRows.setNote(.heartbeat, note) } } catch { beatOwed = true }
    }

    /// A sync directory's start: its inbox folders, how it is seen, its one cart served.
    private func startDirectory() throws(AgentError) {
        for folder in ["new", "cur", "tmp"] { try Posix.makeFolders(in: root, "inbox/\(folder)") }
        rootChoice = try WatchChoice.decide(directory: root, cart: configuration.cart, settings: configuration.watch, override: watchOverride)
        looks.restart(intervalMs: rootChoice.intervalMs)
        var watcher: Watcher?
        if !rootChoice.polls {
            let inotify: Inotify
            do { inotify = try Inotify(path: root) } catch { throw .system(error) }
            self.inotify = inotify
            do throws(AgentError) {
                watcher = try Watcher(directory: root, cart: configuration.cart, inotify: inotify, isTreeCart: false, databaseDirectory: database.stateDirectory)
            } catch {
                // No watch left (other programs of this user hold them): polled, and said why.
                guard case let .system(failure) = error, failure.isWatchLimit else { throw error }
                pollForWantOfWatches(root)
            }
        }
        // With followSymlinks the cart may be a link to a file elsewhere, whose writes inotify
        // does not see in the sync directory: it is looked at every interval as well.
        let poller = watcher == nil || configuration.followSymlinks ? Poller(directory: root, cart: configuration.cart, isTreeCart: false, databaseDirectory: database.stateDirectory) : nil
        serve(Cart(id: Agent.directoryCart, store: engines[Agent.directoryCart]!.store, watcher: watcher, poller: poller) { [unowned self] in self.timingChanged($0) })
    }

    /// A tree's start: the root watched, the watch limit said, the carts gone while the agent was
    /// down ended, every cart served.
    private func startTree(_ tree: Tree) throws(AgentError) {
        let inotify: Inotify
        var rootWatched = true
        do throws(SystemError) {
            inotify = try Inotify(path: tree.root)
            do throws(SystemError) { try inotify.watch(tree.root, [.create, .movedTo, .delete, .movedFrom, .deleteSelf, .moveSelf, .onlyDirectory]) } catch {
                // No watch left (other programs of this user hold them): the tree is polled.
                guard error.isWatchLimit else { throw error }
                rootWatched = false
            }
        } catch {
            throw .system(error)
        }
        self.inotify = inotify
        let ids = try tree.cartDirectories()
        let perCart = Watcher.watchCount(cart: configuration.cart, isTreeCart: true)
        let needed = 1 + ids.count * perCart
        let (limit, systemLimit) = Agent.watchLimit()
        rootChoice = try WatchChoice.decide(directory: tree.root, cart: configuration.cart, settings: configuration.watch, override: watchOverride)
        if !rootWatched, !rootChoice.polls { pollForWantOfWatches(tree.root) }
        looks.restart(intervalMs: rootChoice.intervalMs)
        rootIdentity = Posix.info(tree.root, follow: false)?.identity
        if rootChoice.polls {
            logger.log(.info, "the tree has \(ids.count) carts, polled every \(rootChoice.intervalMs) ms (\(rootChoice.reason))")
        } else {
            logger.log(.info, "the tree has \(ids.count) carts: \(needed) inotify watches needed (\(perCart) per cart), the limit is \(limit == Int.max ? "unknown" : String(limit))")
            watchLimit = limit
            if needed > limit {
                logger.log(.warning, "\(tree.root): \(ids.count) carts need \(needed) inotify watches, over the limit of \(limit): the carts beyond it are polled every \(rootChoice.intervalMs) ms; \(needed <= systemLimit ? "BASKET_SYNC_MAX_WATCHES lowers the limit below the system's \(systemLimit): raise or unset it" : "raise the limit (sysctl fs.inotify.max_user_watches=\(max(needed * 2, 65536)), and in /etc/sysctl.d/ to keep it)") to watch them all")
            }
        }
        let gone = try tree.removeGoneCarts()
        for id in gone.ended { logger.log(.info, "cart \(id): its directory left the tree more than \(AgentConfiguration.number(Tree.awaySeconds)) s ago: the cart ended") }
        for (id, left) in gone.away.sorted(by: { $0.key < $1.key }) { markAway(id, for: left) }
        // Many new carts (a first start): adopted together, not one commit and fsync each.
        tree.adoptNew(ids)
        for id in ids {
            // SIGTERM stops the start between carts: the rest are taken at the next start.
            if SignalPipe.stopRequested { break }
            takeOn(id)
        }
        // The start's passes made and freed a few engines' worth of memory per cart: given back
        // to the system, the agent's resident memory is what it keeps.
        Posix.releaseFreedMemory()
    }

    /// The root polled from the start, every cart with it: not one inotify watch could be placed.
    private func pollForWantOfWatches(_ directory: String) {
        rootChoice = WatchChoice(polls: true, intervalMs: rootChoice.intervalMs, reason: "no inotify watch left")
        logger.log(.warning, "\(directory): \(SystemError.watchLimitReached); polled every \(rootChoice.intervalMs) ms meanwhile (a restart watches it again)")
    }

    /// The line that says the start pass is over.
    private func startLine() -> String {
        let synchronizer = isSynchronizerRegistered ? "" : ", no synchronizer registered: Mealz deltas are ignored"
        guard tree != nil else {
            return "watching \(root) (cart \(configuration.cart), pid \(Posix.processId), \(watchDescription)\(synchronizer))"
        }
        return "watching the tree \(root) (\(carts.count) carts, \(watchDescription), cart \(configuration.cart), pid \(Posix.processId)\(synchronizer))"
    }

    /// Keeps `cart` in ``timed`` while it has a retry or a deadline ahead, and in
    /// ``inboxWaiting`` while inbox entries are left for its next turn — while it is served (a
    /// cart forgotten, or served again as another, is never put back).
    func timingChanged(_ cart: Cart) {
        guard carts[cart.id] === cart else { return }
        if cart.retryAt != nil || cart.deadline != nil { timed[cart.id] = cart } else { timed[cart.id] = nil }
        if cart.inboxLeft > 0 { inboxWaiting[cart.id] = cart } else { inboxWaiting[cart.id] = nil }
    }

    /// Cart `id` no longer served: forgotten with its engine, its timing and its turn.
    func forget(_ id: String) {
        if carts[id]?.poller != nil { polledCarts -= 1 }
        polledForWant.remove(id)
        carts[id] = nil
        polledList = nil
        engines[id] = nil
        timed[id] = nil
        inboxWaiting[id] = nil
    }

    /// Serves `cart` from now on, and runs a whole pass on it.
    func serve(_ cart: Cart) {
        // Taken on again while served (its name holds its marker, the folder there another —
        // a copy swapped in): the cart as it was, its engine pinned to the folder that moved
        // away, is let go first.
        if carts[cart.id] != nil { forget(cart.id) }
        carts[cart.id] = cart
        polledList = nil
        if cart.poller != nil { polledCarts += 1 }
        if started { recordWatch() }
        waiting[cart.id] = nil
        lostCarts[cart.id] = nil
        attempt(cart, .everything)
    }

    /// Milliseconds until the next deadline or retry of any cart; -1 (wait for an event) when
    /// none. While a cart's retry is due it waits for that alone: the retry expires the windows
    /// too, and a window already past must not turn a failing step into a busy loop.
    private func waitTimeout() -> Int32 {
        var due: Double?
        for cart in timed.values {
            guard let next = cart.retryAt ?? cart.deadline else { continue }
            if due == nil || next < due! { due = next }
        }
        for retry in takeOnRetries.values where due == nil || retry.at < due! { due = retry.at }
        if let first = away.values.min(), due == nil || first < due! { due = first }
        guard let due else { return -1 }
        let milliseconds = ((due - Posix.monotonicSeconds()) * 1000).rounded(.up)
        return Int32(max(0, min(milliseconds, Double(Int32.max))))
    }
}
