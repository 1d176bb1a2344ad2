import BasketSync
import BasketSyncAgent
import BasketSyncHostCheck
import BasketSyncWire

/// Writes a result (stdout) or a message (stderr).
func emit(_ text: String, to stream: Terminal.Stream = .output) { Terminal.emit(text, to: stream) }

/// A logger with the sync directory's configured format.
func logger(for directory: String) throws(AgentError) -> Logger {
    Logger(format: try AgentConfiguration.load(directory: directory).logFormat)
}

/// The agent. The error that stops it (from the start: a directory that is not a sync directory)
/// is a line of its log, in the log's format.
func watch(_ invocation: Invocation, directory: String, isSynchronizerRegistered: Bool, logFormat: LogFormat?, quiet: Bool, poll: WatchChoice.Override?) -> Int32 {
    let logger = Logger(format: logFormat ?? .human)
    logger.isQuiet = quiet
    do {
        if invocation.directory != nil { try Terminal.enter(directory) }
        try Agent(directory: directory, isSynchronizerRegistered: isSynchronizerRegistered, logFormat: logFormat, watchOverride: poll, logger: logger).run()
        return 0
    } catch {
        logger.log(.error, error.description)
        return error.exitCode
    }
}

func run() throws(AgentError) -> Int32 {
    let invocation = try Invocation(arguments: try Terminal.arguments()[...])
    let directory = Terminal.syncDirectory(option: invocation.directory)
    if case let .watch(noSynchronizer, logFormat, quiet, poll) = invocation.command {
        return watch(invocation, directory: directory, isSynchronizerRegistered: !noSynchronizer, logFormat: logFormat, quiet: quiet, poll: poll)
    }
    SignalPipe.releaseHeld()
    // As `git -C`: the other paths on the command line are relative to the sync directory.
    // Where the directory stands, told right before anything is touched (a broken tree
    // configuration is its error, a name under a tree that is not a cart id a usage error).
    if !invocation.command.isHelpOrVersion {
        do { try Workspace.check(directory) } catch {
            // A delivery into a tree's cart that is made goes on whatever the tree's
            // configuration says meanwhile (docs/spec.md: push), as in a sync directory.
            guard case .push = invocation.command, error.exitCode == 78, Workspace.isMadeTreeCart(directory) else { throw error }
        }
    }
    // A cart of a tree is made by whoever comes first: the Mealz side's push may (docs/spec.md §8).
    if case .push = invocation.command { try Commands.prepareCart(directory: directory) }
    if invocation.directory != nil, !invocation.command.isInitialize { try Terminal.enter(directory) }
    switch invocation.command {
    case let .help(topic):
        emit(Help.text(for: topic))
    case .version:
        emit("basket-sync \(basketSyncVersion)")
    case .completion:
        emit(Manual.bashCompletion)
    case .manual:
        emit(Manual.page)
    case let .initialize(adopt, tree, shared, rebind):
        // Every argument checked before anything is made.
        if let shared { try Commands.checkShareGroup(shared) }
        let created = try Commands.initialize(directory: directory, adopt: adopt, tree: tree, rebind: rebind)
        let what = tree || Workspace.of(directory) == .treeRoot ? "a tree of carts" : "a sync directory"
        emit(created.isEmpty ? "\(directory) is already \(what); nothing to create" : created.map { "created \($0)" }.joined(separator: "\n"))
        if let shared { emit(try Commands.share(directory: directory, group: shared).joined(separator: "\n")) }
    case .watch:
        break  // run by watch(_:directory:isSynchronizerRegistered:logFormat:quiet:poll:)
    case let .sync(noSynchronizer, json):
        let report = try Commands.sync(directory: directory, isSynchronizerRegistered: !noSynchronizer, logger: try logger(for: directory))
        emit(json ? report.json : report.human)
        return report.status
    case let .push(kind, products, id):
        emit(try Commands.push(directory: directory, kind: kind, products: products, id: id))
    case let .status(json):
        let report = try StatusReport(directory: directory)
        emit(json ? report.json : report.human)
        // Reported, and said where a script looks: the other commands refuse with 78.
        if let problem = report.configurationProblem {
            emit("basket-sync: \(problem)", to: .error)
            return 78
        }
    case .metrics:
        let report = try StatusReport(directory: directory)
        emit(Metrics.text(report))
        // As `status`: shown (counted among the errors), and refused as every command refuses.
        if let problem = report.configurationProblem {
            emit("basket-sync: \(problem)", to: .error)
            return 78
        }
    case let .apply(json, timeout) where Workspace.of(directory) == .treeRoot:
        let summary = try Commands.applyTree(root: directory, lockTimeout: timeout, logger: try logger(for: directory))
        if !summary.applied.isEmpty || !json { emit(json ? summary.json : summary.human) }
        for (cart, error) in summary.failed { emit("basket-sync: cart \(cart): \(error.description)", to: .error) }
        if let first = summary.failed.first { return first.error.exitCode }
    case let .apply(json, timeout):
        let summary = try Commands.apply(directory: directory, lockTimeout: timeout, logger: try logger(for: directory))
        emit(json ? summary.json : summary.human)
    case let .lock(timeout, command):
        return try Commands.lock(directory: directory, timeout: timeout, command: command)
    case let .paymentStarted(total, orderId, products, json):
        let outcome = try Commands.paymentStarted(directory: directory, total: total, orderId: orderId, productsFile: products, logger: try logger(for: directory))
        emit(json ? outcome.json : outcome.human)
    case let .handlePayment(total, orderId, products, then, json):
        let outcome = try Commands.handlePayment(directory: directory, total: total, orderId: orderId, productsFile: products, then: then,
                                                 completionOutputToError: json, logger: try logger(for: directory))
        emit(json ? outcome.json : outcome.human)
        if case let .couldNotStart(reason) = outcome.completion {
            emit("basket-sync: cannot run the completion \(reason)", to: .error)
            return 66
        }
        if case let .lost(reason) = outcome.completion {
            emit("basket-sync: \(reason)", to: .error)
            return 75
        }
        if case let .ran(status) = outcome.completion, status != 0 {
            emit("basket-sync: the completion \(then[0]) exited with status \(status); the payment stays recorded, and a retry of handle-payment runs the completion again", to: .error)
            return status
        }
    case let .checkHost(command, scenarios, seed, limit, json):
        let report = try HostCheck.run(directory: directory, command: command, scenarios: scenarios, seed: seed, limit: limit)
        emit(json ? report.json : report.human)
        if !report.passed { return 65 }
    case let .wait(after, timeout) where Workspace.of(directory) == .treeRoot:
        guard after == nil else {
            throw .usage("wait on a tree's root takes no --after: each cart is waited for after its own host's progress (give -C \(directory)/CART-ID for one cart)")
        }
        let waiting = try Commands.waitTree(root: directory, timeout: timeout) { cart, error in
            emit("basket-sync: cart \(cart): warning: its records are not listed: \(error.description)", to: .error)
        }
        emit(waiting.map(\.json).joined(separator: "\n"))
    case let .wait(after, timeout):
        let result = try Commands.wait(directory: directory, after: after, timeout: timeout) { error in
            emit("basket-sync: warning: the records are not listed until the cart can be read: \(error.description)", to: .error)
        }
        emit(String(decoding: result.lines.joined(), as: UTF8.self))
    case let .setStore(externalId, mode, json):
        let summary = try Commands.setStore(directory: directory, externalId: externalId, mode: mode, logger: try logger(for: directory))
        emit(json ? summary.json : summary.human)
    case let .validate(files, kind):
        var invalid = false
        // A file that cannot be read (missing, say) is said and the others checked all the same;
        // its error's code is the exit status, before 65.
        var unreadable: Int32?
        for file in files {
            let problems: [String]
            do throws(AgentError) {
                problems = try Commands.validate(path: file, kind: kind ?? Commands.guessKind(of: file), directory: directory,
                                                 enteredDirectory: invocation.directory == nil ? nil : directory)
            } catch {
                emit("basket-sync: \(error.description)", to: .error)
                unreadable = unreadable ?? error.exitCode
                continue
            }
            if problems.isEmpty {
                emit("\(file == "-" ? "standard input" : file): valid")
            } else {
                invalid = true
                for problem in problems { emit(problem) }
            }
        }
        if let unreadable { return unreadable }
        if invalid { return 65 }
    }
    return 0
}

// The agent's stop signals wait for their handlers from the first instant (exec included).
if CommandLine.arguments.contains("watch") { SignalPipe.hold() }
Terminal.withoutBacktracer()
// handle-payment's completion, under the supervisor that records its outcome (not a user command).
// Before anything else: the process that started this one (see `wait`).
_ = Posix.parentAtStart
let arguments = CommandLine.arguments
if arguments.count >= 6, arguments[1] == Commands.completionSupervisor, let seq = UInt64(arguments[4]), arguments[5] == "--", arguments.count > 6 {
    let logFormat = (try? AgentConfiguration.load(directory: arguments[2]).logFormat) ?? .human
    Terminal.exit(Commands.superviseCompletion(directory: arguments[2], orderId: arguments[3], seq: seq, then: Array(arguments[6...]), logger: Logger(format: logFormat)))
}
do {
    Terminal.exit(try run())
} catch {
    emit("basket-sync: \(error.description)", to: .error)
    Terminal.exit(error.exitCode)
}
