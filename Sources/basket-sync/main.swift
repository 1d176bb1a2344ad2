import BasketSync
import BasketSyncAgent
import Glibc

/// Writes to stdout (a result) or stderr (a message).
func emit(_ text: String, to fd: Int32 = 1) {
    var bytes = Array(text.utf8)
    if !text.hasSuffix("\n") { bytes.append(0x0A) }
    bytes.withUnsafeBytes { _ = write(fd, $0.baseAddress, $0.count) }
}

/// The sync directory: `-C`, else `$BASKET_SYNC_DIR`, else the current directory; made absolute.
func resolveDirectory(_ option: String?) -> String {
    var path = option ?? getenv("BASKET_SYNC_DIR").map { String(cString: $0) } ?? "."
    if path.isEmpty { path = "." }
    if !path.hasPrefix("/") {
        if let pointer = getcwd(nil, 0) {
            let cwd = String(cString: pointer)
            free(pointer)
            path = path == "." ? cwd : "\(cwd)/\(path)"
        }
    }
    while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
    return path
}

func run() throws(AgentError) -> Int32 {
    let invocation = try Invocation(arguments: CommandLine.arguments.dropFirst())
    let directory = resolveDirectory(invocation.directory)
    switch invocation.command {
    case let .help(topic):
        emit(Help.text(for: topic))
    case .version:
        emit("basket-sync \(basketSyncVersion)")
    case .initialize:
        let created = try Commands.initialize(directory: directory)
        emit(created.isEmpty ? "\(directory) is already a sync directory; nothing to create" : created.map { "created \($0)" }.joined(separator: "\n"))
    case let .watch(noSynchronizer, logFormat):
        let agent = try Agent(directory: directory, registered: !noSynchronizer, logFormat: logFormat, logger: Logger())
        try agent.run()
    case let .sync(noSynchronizer, json):
        let configuration = try AgentConfiguration.load(directory: directory)
        let summary = try Commands.syncOnce(directory: directory, registered: !noSynchronizer, logger: Logger(format: configuration.logFormat))
        let cart: String
        switch summary.cart {
        case .missing: cart = "missing"
        case .unchanged: cart = "unchanged"
        case .rejected: cart = "rejected"
        case .taken: cart = "taken"
        }
        if json {
            emit("{\"cart\":\"\(cart)\",\"inbox\":{\"taken\":\(summary.inbox.taken),\"duplicates\":\(summary.inbox.duplicates),\"bad\":\(summary.inbox.bad)}}")
        } else {
            emit("cart \(cart); inbox: \(summary.inbox.taken) taken, \(summary.inbox.duplicates) duplicates, \(summary.inbox.bad) bad")
        }
        if case .rejected = summary.cart { return 65 }
    case let .push(kind, products, id):
        emit(try Commands.push(directory: directory, kind: kind, products: products, id: id))
    case let .status(json):
        let report = try StatusReport(directory: directory)
        emit(json ? report.json : report.human)
    }
    return 0
}

do {
    exit(try run())
} catch {
    emit("basket-sync: \(error.description)", to: 2)
    exit(error.exitCode)
}
