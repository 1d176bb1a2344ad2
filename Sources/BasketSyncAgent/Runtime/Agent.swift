import BasketSync
import BasketSyncWire

/// `basket-sync watch`: the long-running agent of one sync directory.
///
/// One event loop (a wait on the watcher's descriptor and the signal pipe, with the timeout of the
/// next pending-window deadline) and one funnel (``SyncEngine``). Idle, it waits with no timeout at
/// all: only a file event, a signal or a pending window's expiry wakes it.
public final class Agent {
    private let engine: SyncEngine
    private let logger: Logger
    private var lockFd: Int32 = -1
    /// After a temporary failure (disk full, database busy), when to try again.
    private var retryAt: Date?
    private var retryDelay: Double = 0.5
    /// An error the agent must stop on.
    private var fatal: AgentError?
    /// `--log-format`, which wins over the configuration's `logFormat`.
    private let logFormat: LogFormat?
    /// `--poll[=MS]`, which wins over the configuration's `watch`.
    private let watchOverride: WatchChoice.Override?

    /// Opens the sync directory for watching; `isSynchronizerRegistered: false` is
    /// `--no-synchronizer`, `watchOverride` is `--poll[=MS]`.
    public init(directory: String, isSynchronizerRegistered: Bool, logFormat: LogFormat?, watchOverride: WatchChoice.Override? = nil, logger: Logger) throws(AgentError) {
        self.logger = logger
        self.logFormat = logFormat
        self.watchOverride = watchOverride
        if case let .treeCart(root, id) = Place.of(directory) {
            throw .busy("\(directory): is cart \(id) of the tree \(root), which one agent serves whole: run basket-sync -C \(root) watch (an agent of one cart inside a tree is refused)")
        }
        engine = try SyncEngine(directory: directory, isSynchronizerRegistered: isSynchronizerRegistered, logger: logger)
        // A person following the agent sees one line per record it makes.
        engine.logsActivity = true
        logger.format = logFormat ?? engine.configuration.logFormat
    }

    /// Takes the directory's agent lock; a second agent fails as busy and names the first one's pid.
    private func lock() throws(AgentError) {
        lockFd = try Agent.takeLock(stateDirectory: engine.store.stateDirectory) { pid in
            "\(engine.directory): another basket-sync watch (pid \(pid)) is already watching this directory; stop it first, or use basket-sync sync beside it"
        }
    }

    /// Takes `agent.lock` in `stateDirectory` without waiting, and writes the pid in it; when
    /// another process holds it, throws `.busy` with `message(pid of the holder)`.
    static func takeLock(stateDirectory: String, message: (String) -> String) throws(AgentError) -> Int32 {
        let path = "\(stateDirectory)/agent.lock"
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

    /// Runs until SIGTERM or SIGINT, then returns (exit 0). Throws when it cannot start or must stop.
    public func run() throws(AgentError) {
        try lock()
        let signals: SignalPipe
        do { signals = try SignalPipe(path: engine.directory) } catch { throw .system(error) }
        for folder in ["new", "cur", "tmp"] { try Posix.makeFolders(in: engine.directory, "inbox/\(folder)") }
        var choice = try WatchChoice.decide(directory: engine.directory, cart: engine.configuration.cart, settings: engine.configuration.watch, override: watchOverride)
        // inotify, or a poller where inotify is blind (SPEC §10): both say what changed alike.
        let watcher = choice.polls ? nil : try Watcher(directory: engine.directory, cart: engine.configuration.cart)
        let poller = choice.polls ? Poller(directory: engine.directory, cart: engine.configuration.cart, isTreeCart: false) : nil
        var looks = LookClock(intervalMs: choice.intervalMs)

        // Everything written before the watches were in place: recover the files, take what waits.
        attempt(.everything)
        // Said once the start pass is over: from here on the agent reads only what inotify reports,
        // so a host (or a test) that waits for this line never races the start pass.
        if fatal == nil {
            recordWatch(choice)
            logger.log(.info, "watching \(engine.directory) (cart \(engine.configuration.cart), pid \(Posix.processId), \(choice.description)\(engine.isSynchronizerRegistered ? "" : ", no synchronizer registered: Mealz deltas are ignored"))", evenWhenQuiet: true)
        }

        while true {
            if let fatal { throw fatal }
            let ready: [Bool]
            let timeout = poller == nil ? waitTimeout() : looks.timeout(within: waitTimeout())
            do { ready = try Posix.waitReadable([watcher?.fd ?? -1, signals.fd], timeout: timeout) } catch { throw .system(error) }
            if ready[1] {
                for signal in signals.drain() {
                    switch signal {
                    case .hangup:
                        let cart = engine.configuration.cart
                        do {
                            try engine.reloadConfiguration()
                            logger.format = logFormat ?? engine.configuration.logFormat
                            logger.log(.info, "reloaded \(AgentConfiguration.fileName)")
                            if engine.configuration.cart != cart {
                                watcher?.follow(cart: engine.configuration.cart)
                                poller?.follow(cart: engine.configuration.cart)
                                logger.log(.info, "the cart is now \(engine.configuration.cart)")
                                attempt(.cart)
                            }
                            let now = try WatchChoice.decide(directory: engine.directory, cart: engine.configuration.cart, settings: engine.configuration.watch, override: watchOverride)
                            if now.polls != choice.polls {
                                logger.log(.warning, "the new \"watch\" setting chooses \(now.polls ? "polling" : "inotify"); the agent keeps \(choice.description) until it restarts")
                            } else if now.polls, now.intervalMs != choice.intervalMs {
                                choice = now
                                looks.restart(intervalMs: choice.intervalMs)
                                logger.log(.info, "polling every \(choice.intervalMs) ms from now on")
                                recordWatch(choice)
                            }
                        } catch {
                            engine.reportError(error)
                            logger.log(.warning, "the settings in force are kept until \(AgentConfiguration.fileName) is fixed and SIGHUP sent again")
                        }
                    case .interrupt, .terminate:
                        logger.log(.info, "stopping on signal \(signal.number)")
                        return
                    }
                }
            }
            var looked: (kinds: Set<Watcher.Change>, delivered: [String])?
            if let watcher, ready[0] { looked = try watcher.changes() }
            if let poller, looks.due() { looked = poller.changes(onlyFresh: retryAt != nil) }
            if let (changes, delivered) = looked {
                if changes.contains(.directoryGone) {
                    throw .directoryGone(path: engine.directory)
                }
                var scope: SyncEngine.PassScope = []
                if changes.contains(.overflow) {
                    logger.log(.warning, "the inotify queue overflowed: reading everything again")
                    scope = [.publish, .inbox, .cart]
                }
                if changes.contains(.commit) { scope.insert(.publish) }
                if changes.contains(.inbox) { scope.insert(.inbox) }
                if changes.contains(.cart) { scope.insert(.cart) }
                if !scope.isEmpty { attempt(scope, inboxSeen: delivered) }
            }
            if let due = retryAt {
                if due <= Date() {
                    retryAt = nil
                    attempt(.everything)
                }
            } else if let deadline = engine.nextDeadline, deadline <= Date() {
                attempt(.expire)
            }
        }
    }

    /// How this agent watches, kept for `status` with its pid.
    private func recordWatch(_ choice: WatchChoice) {
        _ = try? engine.store.withTransaction { () throws(AgentError) in try engine.store.setNote(WatchChoice.noteKey, "\(Posix.processId)\t\(choice.description)") }
    }

    /// Runs a pass; a failure is reported and retried later with a growing delay — except a
    /// database gone from under the agent, which stops it (`fatal`).
    private func attempt(_ scope: SyncEngine.PassScope, inboxSeen: [String] = []) {
        do {
            try engine.pass(scope, inboxSeen: inboxSeen)
            // Only a whole pass that succeeds ends a run of failures: a small one (a cart
            // unchanged) says nothing of the part that failed.
            if scope == .everything { retryDelay = 0.5 }
        } catch {
            switch error {
            case .databaseGone, .directoryGone, .databaseBehind:
                // Not temporary: retrying would only add reports to a database that is wrong.
                fatal = error
                return
            default:
                break
            }
            engine.reportError(error)
            retryAt = Date().addingTimeInterval(retryDelay)
            logger.log(.info, "retrying in \(retryDelay) s")
            retryDelay = min(retryDelay * 2, 30)
        }
    }

    /// Milliseconds until the next pending window or retry; -1 (wait for an event) when none.
    /// While a retry is due it waits for that alone: the retry expires the windows too, and a
    /// window already past must not turn a failing step into a busy loop.
    private func waitTimeout() -> Int32 {
        guard let due = retryAt ?? engine.nextDeadline else { return -1 }
        let milliseconds = (due.timeIntervalSinceNow * 1000).rounded(.up)
        return Int32(max(0, min(milliseconds, Double(Int32.max))))
    }
}
