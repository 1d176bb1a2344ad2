import BasketSync
import BasketSyncAgent
import BasketSyncWire

/// A parsed command line: the sync directory option and the command.
struct Invocation {
    enum Command: Equatable {
        case help(String?)
        case version
        case initialize(adopt: Bool, tree: Bool, shared: String?, rebind: Bool)
        case watch(noSynchronizer: Bool, logFormat: LogFormat?, quiet: Bool, poll: WatchChoice.Override?)
        case sync(noSynchronizer: Bool, json: Bool)
        case push(kind: Commands.PushKind, products: [RetailerProduct], id: String?)
        case status(json: Bool)
        case metrics
        case apply(json: Bool, timeout: Double?)
        case lock(timeout: Double?, command: [String])
        case paymentStarted(total: Money, orderId: String?, products: String?, json: Bool)
        case handlePayment(total: Money, orderId: String, products: String?, then: [String], json: Bool)
        case setStore(externalId: String, mode: SyncMode?, json: Bool)
        case validate(files: [String], kind: Commands.FileKind?)
        case wait(after: UInt64?, timeout: Double?)
        case checkHost(command: [String], scenarios: [String]?, seed: UInt64?, limit: Double?, json: Bool)
        case completion(shell: String)
        case manual
    }

    var directory: String?
    var command: Command

    static let commands = ["init", "watch", "sync", "push", "status", "metrics", "apply", "payment-started", "handle-payment", "set-store", "validate", "wait", "lock", "check-host", "completion", "man"]

    /// Parses `basket-sync [-C DIR] COMMAND [OPTIONS]`; `--` ends the options.
    init(arguments: ArraySlice<String>) throws(AgentError) {
        var rest = arguments
        directory = nil
        while let first = rest.first, first.hasPrefix("-") {
            rest.removeFirst()
            switch first {
            case "-C", "--dir":
                guard let value = rest.popFirst() else { throw .usage("\(cut(first)) needs a directory: basket-sync \(cut(first)) DIR COMMAND") }
                directory = value
            case let option where option.hasPrefix("--dir="):
                directory = String(option.dropFirst("--dir=".count))
            case "-h", "--help":
                command = .help(rest.first)
                return
            case "--version":
                command = .version
                return
            default:
                throw .usage("unknown option \(cut(first)); see basket-sync --help")
            }
        }
        guard let name = rest.popFirst() else {
            command = .help(nil)
            return
        }
        // `--then CMD ARG…` takes every argument after it, as the completion's argv.
        var then: [String] = []
        if name == "handle-payment", let index = rest.firstIndex(of: "--then") {
            then = Array(rest[(index + 1)...])
            rest = rest[..<index]
            if then.isEmpty { throw .usage("handle-payment --then needs a command: --then CMD ARG…") }
        }
        if rest.contains("--help") || rest.contains("-h") {
            guard Invocation.commands.contains(name) else { throw .usage("unknown command \(cut(name)); the commands are \(Invocation.commands.joined(separator: ", "))") }
            command = .help(name)
            return
        }
        var options = OptionReader(command: name, arguments: rest)
        switch name {
        case "init":
            let adopt = options.flag("--adopt")
            let tree = options.flag("--tree")
            let shared = try options.value("--shared")
            let rebind = options.flag("--rebind")
            try options.finish()
            command = .initialize(adopt: adopt, tree: tree, shared: shared, rebind: rebind)
        case "watch":
            let noSynchronizer = options.flag("--no-synchronizer")
            let quiet = options.flag("--quiet")
            let format = try options.value("--log-format")
            var poll: WatchChoice.Override?
            if options.flag("--poll") { poll = WatchChoice.Override(mode: .poll, intervalMs: nil, source: "--poll") }
            if let index = options.arguments.firstIndex(where: { $0.hasPrefix("--poll=") }) {
                let text = options.arguments.remove(at: index)
                guard let override = WatchChoice.Override.parse(String(text.dropFirst(2)), source: text) else {
                    throw .usage("--poll=MS takes a whole number of milliseconds from \(AgentConfiguration.Watching.intervals.lowerBound) to \(AgentConfiguration.Watching.intervals.upperBound), not \(cut(text.dropFirst("--poll=".count)))")
                }
                poll = override
            }
            try options.finish()
            var logFormat: LogFormat?
            if let format {
                guard let parsed = LogFormat(rawValue: format) else { throw .usage("--log-format is human or json, not \(cut(format))") }
                logFormat = parsed
            }
            command = .watch(noSynchronizer: noSynchronizer, logFormat: logFormat, quiet: quiet, poll: poll)
        case "sync":
            let noSynchronizer = options.flag("--no-synchronizer")
            let json = options.flag("--json")
            try options.finish()
            command = .sync(noSynchronizer: noSynchronizer, json: json)
        case "status":
            let json = options.flag("--json")
            try options.finish()
            command = .status(json: json)
        case "completion":
            let shells = try options.operands()
            try options.finish()
            guard shells == ["bash"] else { throw .usage("completion takes the shell: basket-sync completion bash (the only one for now)") }
            command = .completion(shell: "bash")
        case "man":
            try options.finish()
            command = .manual
        case "push":
            let redirect = options.flag("--redirect")
            let state = options.flag("--state")
            let basketText = try options.value("--basket")
            let transfer = try options.value("--transfer")
            let id = try options.value("--id")
            let lines = try options.operands()
            let kinds = [redirect, state, transfer != nil].filter { $0 }.count
            guard kinds <= 1 else { throw .usage("push takes one of --state, --transfer ID and --redirect") }
            var basket: UInt64?
            if let basketText {
                guard state else { throw .usage("push --basket goes with --state: the basket a WebView state was based on") }
                guard let value = UInt64(basketText), value >= 1, value <= SyncState.largestSeq else { throw .usage("--basket \(cut(basketText)) is not a basket number; give the \"basket\" of a notification, from 1 to \(SyncState.largestSeq)") }
                basket = value
            }
            let kind: Commands.PushKind = redirect ? .redirect : state ? .state(basket: basket) : transfer.map { .transfer($0) } ?? .delta
            if kind == .redirect && !lines.isEmpty { throw .usage("push --redirect takes no products") }
            if kind == .delta && lines.isEmpty { throw .usage("push needs products: basket-sync push sku-1=+2 sku-9=-1") }
            let products = try lines.map { (line) throws(AgentError) in try Invocation.product(line, signed: kind == .delta) }
            command = .push(kind: kind, products: products, id: id)
        case "check-host":
            let scenarioText = try options.value("--scenarios")
            let seedText = try options.value("--seed")
            let limitText = try options.value("--limit")
            let json = options.flag("--json")
            let host = options.afterDoubleDash
            try options.finish(allowingAfterDoubleDash: true)
            guard !host.isEmpty else {
                throw .usage("check-host needs the host's apply command after --: basket-sync check-host -- ./my-host apply")
            }
            var seed: UInt64?
            if let seedText {
                guard let value = UInt64(seedText) else { throw .usage("--seed \(cut(seedText)) is not a seed; give the number a report printed") }
                seed = value
            }
            let scenarios = scenarioText.map { $0.split(separator: ",").map { String($0.filter { $0 != " " }) }.filter { !$0.isEmpty } }
            var limit: Double?
            if let limitText {
                guard let seconds = Invocation.decimal(limitText), seconds.isFinite, seconds > 0, seconds <= 86_400 else {
                    throw .usage("--limit \(cut(limitText)) is not a number of seconds; give one above 0 and at most 86400, such as --limit 120")
                }
                limit = seconds
            }
            command = .checkHost(command: host, scenarios: scenarios, seed: seed, limit: limit, json: json)
        case "wait":
            let afterText = try options.value("--after")
            let timeoutText = try options.value("--timeout")
            try options.finish()
            var after: UInt64?
            if let afterText {
                guard let seq = UInt64(afterText), seq <= SyncState.largestSeq else { throw .usage("--after \(cut(afterText)) is not an outbox seq; give a whole number from 0 to \(SyncState.largestSeq), such as --after 17") }
                after = seq
            }
            command = .wait(after: after, timeout: try Invocation.seconds(timeoutText))
        case "metrics":
            try options.finish()
            command = .metrics
        case "apply":
            let json = options.flag("--json")
            let timeout = try Invocation.seconds(options.value("--timeout")) ?? 30
            try options.finish()
            command = .apply(json: json, timeout: timeout)
        case "lock":
            let timeout = try Invocation.seconds(options.value("--timeout"))
            let held = options.afterDoubleDash
            try options.finish(allowingAfterDoubleDash: true)
            guard !held.isEmpty else { throw .usage("lock needs a command after --: basket-sync lock -- ./edit-cart") }
            command = .lock(timeout: timeout, command: held)
        case "payment-started", "handle-payment":
            guard let totalText = try options.value("--total") else {
                throw .usage("\(cut(name)) needs --total, the exact amount paid, such as --total 42.50")
            }
            let total: Money
            switch Money.parse(totalText) {
            case let .success(money):
                total = money
            case let .failure(.tooManyDigits(count)):
                throw .usage("--total \(cut(totalText)) has \(count) digits; an amount holds at most \(Money.maximumDigits)")
            case .failure(.notAnAmount):
                throw .usage("--total \(cut(totalText)) is not an amount; write digits with a point for the cents, such as 42.50 (no comma, sign or exponent)")
            }
            let orderId = try options.value("--order-id")
            let products = try options.value("--products")
            let json = options.flag("--json")
            try options.finish()
            if name == "payment-started" {
                command = .paymentStarted(total: total, orderId: orderId, products: products, json: json)
            } else {
                guard let orderId, !orderId.isEmpty else { throw .usage("handle-payment needs --order-id, the host's order id") }
                command = .handlePayment(total: total, orderId: orderId, products: products, then: then, json: json)
            }
        case "set-store":
            let modeText = try options.value("--mode")
            let json = options.flag("--json")
            let operands = try options.operands()
            guard operands.count == 1, let externalId = operands.first, !externalId.isEmpty else {
                throw .usage("set-store takes one store id: basket-sync set-store EXTERNAL_ID [--mode retailer]")
            }
            var mode: SyncMode?
            if let modeText {
                guard let parsed = SyncMode(rawValue: modeText) else { throw .usage("--mode is retailer or standalone, not \(cut(modeText))") }
                mode = parsed
            }
            command = .setStore(externalId: externalId, mode: mode, json: json)
        case "validate":
            let flags = ["--cart": Commands.FileKind.cart, "--event": .event, "--config": .config].filter { options.flag($0.key) }
            guard flags.count <= 1 else { throw .usage("validate takes one of --cart, --event and --config") }
            let files = try options.operands()
            guard !files.isEmpty else { throw .usage("validate needs a file: basket-sync validate cart.json") }
            command = .validate(files: files, kind: flags.first?.value)
        default:
            throw .usage("unknown command \(cut(name)); the commands are \(Invocation.commands.joined(separator: ", ")); see basket-sync --help")
        }
    }

    /// Parses `sku-1=+2` (a delta) or `sku-1=3` (an absolute quantity).
    static func product(_ text: String, signed: Bool) throws(AgentError) -> RetailerProduct {
        guard let equals = text.lastIndex(of: "="), equals != text.startIndex else {
            throw .usage("\(cut(text)) is not a product; write SKU=QUANTITY, such as sku-1=+2")
        }
        let id = String(text[..<equals])
        let number = text[text.index(after: equals)...]
        let digits = number.hasPrefix("+") ? number.dropFirst() : number
        guard let quantity = Int(digits), !digits.hasPrefix("+") else {
            throw .usage("\(cut(text)): the quantity must be a whole number, such as \(signed ? "+2 or -1" : "3")")
        }
        guard signed || quantity >= 0 else { throw .usage("\(cut(text)): an absolute quantity must be 0 or more") }
        return RetailerProduct(id: id, quantity: quantity)
    }
}

/// Reads the options of one command; what is left at the end is an error.
struct OptionReader {
    let command: String
    var arguments: [String]

    init(command: String, arguments: ArraySlice<String>) {
        self.command = command
        let all = Array(arguments)
        let end = all.firstIndex(of: "--") ?? all.count
        self.arguments = Array(all[..<end])
        trailing = end < all.count ? Array(all[(end + 1)...]) : []
    }

    private var trailing: [String]

    /// The arguments after `--`: a command line given whole (check-host's host command).
    var afterDoubleDash: [String] { trailing }

    mutating func flag(_ name: String) -> Bool {
        guard let index = arguments.firstIndex(of: name) else { return false }
        arguments.remove(at: index)
        return true
    }

    mutating func value(_ name: String) throws(AgentError) -> String? {
        if let index = arguments.firstIndex(where: { $0.hasPrefix(name + "=") }) {
            let value = String(arguments[index].dropFirst(name.count + 1))
            arguments.remove(at: index)
            return value
        }
        guard let index = arguments.firstIndex(of: name) else { return nil }
        guard index + 1 < arguments.count else { throw .usage("\(command) \(cut(name)) needs a value") }
        let value = arguments[index + 1]
        arguments.removeSubrange(index...(index + 1))
        return value
    }

    /// The remaining arguments that are not options (a leading '-' is a sign after `=`).
    mutating func operands() throws(AgentError) -> [String] {
        // A lone "-" is standard input, an operand.
        if let option = arguments.first(where: { $0.hasPrefix("-") && $0 != "-" }) {
            throw .usage("\(command): unknown option \(cut(option)); see basket-sync \(command) --help")
        }
        defer { arguments = []; trailing = [] }
        return arguments + trailing
    }

    func finish(allowingAfterDoubleDash: Bool = false) throws(AgentError) {
        if let extra = (arguments + (allowingAfterDoubleDash ? [] : trailing)).first {
            throw .usage("\(command): unexpected \(cut(extra)); see basket-sync \(command) --help")
        }
    }
}

extension Invocation.Command {
    /// `init` makes the directory it is given: it is not entered first.
    var isInitialize: Bool {
        if case .initialize = self { return true }
        return false
    }

    /// `--help` and `--version` look at no directory.
    var isHelpOrVersion: Bool {
        switch self {
        case .help, .version, .completion, .manual: return true
        default: return false
        }
    }
}

extension Invocation {
    /// Seconds as people write them: digits, with a decimal fraction or not (`30`, `0.5`, `.5`)
    /// — never a sign, an exponent, a hexadecimal float (`0x10`, which `Double` would take) or
    /// spaces; nil otherwise.
    static func decimal(_ text: String) -> Double? {
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard text.utf8.count <= 40, parts.allSatisfy({ $0.utf8.allSatisfy { (0x30...0x39).contains($0) } }),
              parts.contains(where: { !$0.isEmpty }) else { return nil }
        return Double(text)
    }

    /// A `--timeout` value: seconds from 0 to 999999999 (fractions allowed); nil when not given.
    static func seconds(_ text: String?) throws(AgentError) -> Double? {
        guard let text else { return nil }
        guard let seconds = decimal(text), seconds.isFinite, seconds >= 0, seconds < 1e9 else {
            throw .usage("--timeout \(cut(text)) is not a number of seconds; give 0 to 999999999, such as --timeout 30 or --timeout 0.5")
        }
        return seconds
    }
}

/// An argument as an error message quotes it: at most 80 characters (docs/spec.md §7), the rest
/// said by "…" (control characters are escaped where the message is printed).
func cut(_ text: some StringProtocol) -> String { JSONWriter.cut(text) }
