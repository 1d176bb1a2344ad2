import BasketSync
import BasketSyncWire

/// `check-host`: the conformance kit. A host's own apply command is run against scripted
/// scenarios, each in a scratch sync directory of its own with the host's settings (key names,
/// cart path), and what it leaves is compared with what the outbox records lead to.
public enum HostCheck {
    /// What a host must do with the outbox (SPEC §3 and §5).
    public enum Rule: String, CaseIterable, Sendable {
        case exits = "runs to its end (exit 0) within the time limit"
        case valid = "leaves a cart basket-sync can read"
        case atomic = "writes the cart atomically (a temp file renamed over it)"
        case keeps = "keeps other lines and fields"
        case clamp = "clamps a line at 0"
        case reports = "reports syncedThrough"
        case tooFar = "reports syncedThrough no further than what it applied"
        case once = "applies each record once"
        case order = "applies records in seq order"
        case skip = "skips no record"
        case result = "leaves the quantities the records lead to"
    }

    /// The scenarios, in the order they run.
    public static let scenarioNames = ["new-and-existing", "past-zero", "many", "redirect", "replay", "arriving", "crash"]

    /// One broken rule, in one scenario.
    public struct Finding: Sendable {
        public var scenario: String
        public var rule: Rule
        /// What the host did wrong, with the record and the cart it left.
        public var detail: String
    }

    /// What a check found.
    public struct Report: Sendable {
        public var command: [String]
        public var scenarios: [String]
        public var seed: UInt64
        public var findings: [Finding] = []
        /// Where the scratch directories are (kept when something failed, for a look).
        public var scratch: String
        /// Whether the host wrote the cart in at least one scenario: the rules about the carts it
        /// writes are judged only then (a host that does nothing breaks none of them).
        public var hostWroteCart = false
        /// Every rule holds.
        public var passed: Bool { findings.isEmpty }

        /// The report for people: per scenario, then per rule, `ok` or what went wrong.
        public var human: String {
            var lines = ["check-host: \(command.joined(separator: " ")) (seed \(seed); replay with --seed \(seed))"]
            for scenario in scenarios {
                let failed = findings.filter { $0.scenario == scenario }
                if failed.isEmpty { lines.append("ok    \(scenario)") }
                for finding in failed { lines.append("FAIL  \(scenario): \(finding.rule.rawValue): \(finding.detail)") }
            }
            lines.append("rules:")
            for rule in Rule.allCases {
                let broken = findings.filter { $0.rule == rule }.map(\.scenario)
                if !broken.isEmpty {
                    lines.append("  FAIL  \(rule.rawValue) (\(broken.joined(separator: ", ")))")
                } else if !hostWroteCart, ![.exits, .reports].contains(rule) {
                    lines.append("  --    \(rule.rawValue) (not judged: the host never wrote the cart)")
                } else {
                    lines.append("  ok    \(rule.rawValue)")
                }
            }
            if passed {
                lines.append("every rule holds in \(scenarios.count) scenario(s)")
            } else {
                lines.append("the host breaks \(Set(findings.map(\.rule)).count) rule(s); the scratch directories are kept in \(scratch) (each with its cart, outbox.jsonl and host.log)")
            }
            return lines.map(JSONWriter.printable).joined(separator: "\n")
        }
    }

    /// What stops a check that SIGINT or SIGTERM interrupted (the host stopped, the scratch removed).
    static let interrupted = AgentError.busy("check-host was interrupted: the host was stopped and the scratch directories removed")

    /// The limit on one run of the host's command, unless `--limit` says otherwise.
    nonisolated(unsafe) static var runLimitSeconds = 30.0

    /// Runs the scenarios against `command`, with the settings of `directory` (its
    /// `basket-sync.json`, when it has one).
    public static func run(directory: String, command: [String], scenarios: [String]?, seed: UInt64?, limit: Double? = nil) throws(AgentError) -> Report {
        if let limit { runLimitSeconds = limit }
        var command = command
        // As with git -C, a relative path is relative to where the command runs (the sync
        // directory with -C), not to the scratch directory the host runs in.
        if command[0].contains("/"), !command[0].hasPrefix("/") {
            command[0] = FileManager.default.currentDirectoryPath + "/" + command[0]
        }
        let chosen = scenarios ?? scenarioNames
        for name in chosen where !scenarioNames.contains(name) {
            throw .usage("check-host: no scenario \(JSONWriter.quoted(name)); the scenarios are \(scenarioNames.joined(separator: ", "))")
        }
        let settings = try Posix.readFile("\(directory)/\(AgentConfiguration.fileName)", limit: 1 << 20, follow: true)
        let configuration = try settings.map { (bytes) throws(AgentError) in try AgentConfiguration.parse(bytes, path: "\(directory)/\(AgentConfiguration.fileName)") } ?? AgentConfiguration()
        let base = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        let scratch: String
        do { scratch = try Posix.makeTemporaryDirectory("\(base)/basket-sync-check-XXXXXX") } catch { throw .system(error) }
        let seed = seed ?? UInt64.random(in: 1...999_999)
        var report = Report(command: command, scenarios: chosen, seed: seed, scratch: scratch)
        let inotify: Inotify
        do { inotify = try Inotify(path: scratch) } catch { throw .system(error) }
        var random = SplitMix(seed: seed)
        Interruption.catchSignals()
        do {
            for name in chosen {
                var check = try ScenarioRun(name: name, root: scratch, settings: settings, configuration: configuration,
                                            command: command, inotify: inotify)
                try check.play(random: &random)
                report.findings += check.findings
                report.hostWroteCart = report.hostWroteCart || check.hostWroteCart
                if check.neverExits {
                    report.scenarios = Array(chosen.prefix { $0 != name }) + [name]
                    break
                }
            }
        } catch {
            // The check itself could not go on (the command cannot run, the disk is full): no report.
            try? FileManager.default.removeItem(atPath: scratch)
            throw error
        }
        if report.passed { try? FileManager.default.removeItem(atPath: scratch) }
        return report
    }
}

/// A small seeded generator: a failure replays with its seed.
struct SplitMix {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
}

/// The cart a host left, as far as the rules look at it.
private struct LeftCart {
    /// Quantity per SKU; lines at 0 count as absent (a host may keep or remove them).
    var quantities: [ExactID: Int] = [:]
    var labels: [ExactID: String] = [:]
    var syncedThrough: UInt64?
    /// The top-level members other than the lines and syncedThrough, as compact JSON.
    var others: [String: String] = [:]
    /// Lines with a negative quantity.
    var negative: [(ExactID, Int)] = []

    var shown: String {
        let lines = quantities.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        return "{" + lines.joined(separator: ", ") + "}"
    }
}

/// One scenario in its scratch sync directory.
private struct ScenarioRun {
    let name: String
    let directory: String
    let configuration: AgentConfiguration
    let command: [String]
    let inotify: Inotify
    let engine: SyncEngine
    /// The settings file copied into each scratch directory.
    let settings: [UInt8]?
    /// The cart's syncedThrough when the last run started: what it should have skipped.
    var claimBefore: UInt64 = 0
    /// A run went past the time limit: the other scenarios would only wait it out again.
    var neverExits = false
    var findings: [HostCheck.Finding] = []
    /// The cart the scenario starts from: quantities, labels, other fields.
    var initial = LeftCart()
    /// The identity of the cart check-host wrote, and whether the host wrote one since.
    var initialIdentity: [Int64] = []
    var hostWroteCart = false
    var keys: CartKeys { configuration.keys }
    var cartPath: String { "\(directory)/\(configuration.cart)" }

    init(name: String, root: String, settings: [UInt8]?, configuration: AgentConfiguration, command: [String], inotify: Inotify) throws(AgentError) {
        self.name = name
        directory = "\(root)/\(name)"
        self.configuration = configuration
        self.command = command
        self.inotify = inotify
        self.settings = settings
        _ = try Commands.initialize(directory: directory)
        if let settings {
            do { try Posix.writeFileAtomically("\(directory)/\(AgentConfiguration.fileName)", settings, replacing: true) } catch { throw .system(error) }
        }
        try Posix.makeDirectoryTree(Posix.dirname(of: "\(directory)/\(configuration.cart)"))
        // basket-sync's own log of the scenario stays beside it, out of the report.
        let log: Int32
        do { log = try Posix.open("\(directory)/basket-sync.log", [.writeOnly, .create, .append], mode: 0o600) } catch { throw .system(error) }
        engine = try SyncEngine(directory: directory, isSynchronizerRegistered: true, logger: Logger(fd: log))
        do { try inotify.watch(Posix.dirname(of: cartPath), [.modify, .onlyDirectory]) } catch { throw .system(error) }
    }

    // MARK: The scenarios

    mutating func play(random: inout SplitMix) throws(AgentError) {
        switch name {
        case "new-and-existing":
            try start(["X": 1, "A": 1])
            try push([("A", 2), ("B", 1)])
            try runAndCheck()
        case "past-zero":
            try start(["X": 1, "A": 1, "D": 2])
            try push([("A", -3), ("C", -1), ("D", -1)])
            try runAndCheck()
        case "many":
            try start(["X": 1, "A": 3, "B": 1])
            // Never below 0 in seq order: this scenario is about order, and a host that does not
            // clamp must not look like one that reorders (past-zero is about clamping).
            var holding = ["A": 3, "B": 1, "C": 0, "D": 0]
            for _ in 0..<40 { try push(randomDeltas(&random, holding: &holding)) }
            // Last, a line added then taken away: a host that reverses the order clamps the
            // removal first and keeps E — the order shows whatever the seed.
            try push([("E", 2)])
            try push([("E", -2)])
            try runAndCheck()
        case "redirect":
            try start(["X": 1])
            try push([("A", 1)])
            try pushRedirect()
            try push([("A", 1)])
            // Last, a redirect: a host that does not count it in syncedThrough is shown it for ever.
            try pushRedirect()
            try runAndCheck()
        case "replay":
            try start(["X": 1, "A": 1])
            try push([("A", 2)])
            try push([("A", -1), ("B", 2)])
            guard try runAndCheck() else { return }
            let before = try leftCart()
            guard try runOnce() else { return }
            if let after = try leftCart(), let before, after.quantities != before.quantities || after.syncedThrough != before.syncedThrough {
                fail(.once, "run again with nothing new, it changed the cart from \(before.shown) to \(after.shown) (syncedThrough \(before.syncedThrough.map(String.init) ?? "none") → \(after.syncedThrough.map(String.init) ?? "none")); a host skips the records up to its syncedThrough")
            }
        case "arriving":
            // How long a run takes, on a twin directory made the same way.
            var twin = try ScenarioRun(name: "arriving-measure", root: Posix.dirname(of: directory), settings: settings,
                                       configuration: configuration, command: command, inotify: inotify)
            try twin.start(["X": 1])
            for _ in 0..<5 { try twin.push([("A", 1)]) }
            let measured = try twin.measureRun()
            try start(["X": 1])
            for _ in 0..<5 { try push([("A", 1)]) }
            // More records while it runs, spread over its whole run (a host that reads, then
            // claims what the outbox holds when it writes, is caught): whatever it takes of them,
            // its syncedThrough must say so.
            let process = try spawn()
            let interval = UInt32(min(max(measured / 12, 0.001), 2) * 1_000_000)
            var added = 0
            while process.exitStatus() == nil, added < 24 {
                try push([("B", 1)])
                added += 1
                var slept: UInt32 = 0
                while slept < interval, process.exitStatus() == nil {
                    Posix.pause(microseconds: min(500, interval - slept))
                    slept += 500
                }
            }
            guard try finish(process) else { return }
            guard try check(after: "its first run, with records arriving") else { return }
            guard try runOnce() else { return }
            try check(after: "a second run", expectAll: true)
        case "crash":
            // Never below 0 either: this scenario is about a run killed midway, not clamping.
            var holding = ["A": 5, "B": 0, "C": 0, "D": 0]
            let batches = (0..<20).map { _ in randomDeltas(&random, holding: &holding) }
            // How long a whole run takes, measured on a twin directory made the same way (a copy
            // would open and close this database's files, and closing drops this process's locks).
            var twin = try ScenarioRun(name: "crash-measure", root: Posix.dirname(of: directory), settings: settings,
                                       configuration: configuration, command: command, inotify: inotify)
            try twin.start(["X": 1, "A": 5])
            for deltas in batches { try twin.push(deltas) }
            let measured = try twin.measureRun()
            try start(["X": 1, "A": 5])
            for deltas in batches { try push(deltas) }
            for round in 1...6 {
                let delay = UInt32(random.below(max(2, Int(measured * 1.2 * 1_000_000))))
                let process = try spawn()
                var waited: UInt32 = 0
                while waited < delay, process.exitStatus() == nil {
                    Posix.pause(microseconds: min(200, delay - waited))
                    waited += 200
                }
                process.killAll()
                guard try check(after: "killed (SIGKILL) \(Double(delay) / 1000) ms into run \(round)", killed: true) else { return }
            }
            guard try runOnce() else { return }
            try check(after: "a run after the kills", expectAll: true)
        default:
            break
        }
    }

    // MARK: Setting up

    /// Writes the starting cart with the host's key names: each line with a label, a field of
    /// the host's own at the top, syncedThrough 0.
    mutating func start(_ lines: KeyValuePairs<String, Int>) throws(AgentError) {
        var writer = JSONWriter()
        writer.object { object in
            object.member(named: keys.products) { writer in
                writer.array(Array(lines)) { writer, line in
                    writer.object { member in
                        member.member(named: keys.id) { $0.string(line.key) }
                        member.member(named: keys.quantity) { $0.integer(line.value) }
                        member.member(named: keys.id == "label" || keys.quantity == "label" ? "hostLabel" : "label") { $0.string("label of \(line.key)") }
                    }
                }
            }
            object.member(named: keys.products == "hostNote" || keys.syncedThrough == "hostNote" ? "hostNote2" : "hostNote") { writer in
                writer.object { $0.member("keep", true); $0.member("text", "the host's own field") }
            }
            object.member(named: keys.syncedThrough) { $0.integer(0) }
        }
        writer.raw("\n")
        do { try Posix.writeFileAtomically(cartPath, writer.bytes, replacing: true) } catch { throw .system(error) }
        guard let cart = try leftCart() else { throw .badData(path: cartPath, line: 1, column: 1, reason: "check-host could not read back the cart it wrote") }
        initial = cart
        initialIdentity = Posix.linkInfo(cartPath)?.identity ?? []
        // The agent's view: the first cart is its baseline.
        try engine.pass(.everything)
    }

    func push(_ deltas: [(String, Int)]) throws(AgentError) {
        _ = try Commands.push(directory: directory, kind: .delta, products: deltas.map { RetailerProduct(id: $0.0, quantity: $0.1) }, id: nil)
        try engine.pass([.inbox])
    }

    func pushRedirect() throws(AgentError) {
        _ = try Commands.push(directory: directory, kind: .redirect, products: [], id: nil)
        try engine.pass([.inbox])
    }

    /// One to three deltas over four SKUs, between −3 and +3: removals past 0 are frequent, so
    /// that applying records out of order shows.
    /// Random deltas on A–D that never take a line of `holding` below 0 (and keep it up to date).
    func randomDeltas(_ random: inout SplitMix, holding: inout [String: Int]) -> [(String, Int)] {
        var deltas: [(String, Int)] = []
        for _ in 0...random.below(3) {
            let id = ["A", "B", "C", "D"][random.below(4)]
            guard !deltas.contains(where: { $0.0 == id }) else { continue }
            var delta = 1 + random.below(3)
            if random.below(2) == 0 { delta = -min(delta, holding[id] ?? 0) }
            guard delta != 0 else { continue }
            holding[id, default: 0] += delta
            deltas.append((id, delta))
        }
        return deltas
    }

    // MARK: Running the host

    mutating func spawn() throws(AgentError) -> SpawnedProcess {
        _ = try? inotify.events()
        claimBefore = (try? leftCart())??.syncedThrough ?? 0
        do {
            return try SpawnedProcess(command, directory: directory, environment: ["BASKET_SYNC_DIR": directory], log: "\(directory)/host.log")
        } catch {
            throw .missingInput("check-host: cannot run \(command[0]): \(error.reason); give a command on the PATH or a path to one")
        }
    }

    /// Waits for the run to end (killing it past the limit); false when it failed.
    mutating func finish(_ process: SpawnedProcess) throws(AgentError) -> Bool {
        let deadline = Date().addingTimeInterval(HostCheck.runLimitSeconds)
        var status = process.exitStatus()
        while status == nil, Date() < deadline {
            if Interruption.requested { process.killAll(); throw HostCheck.interrupted }
            Posix.pause(microseconds: 1_000)
            status = process.exitStatus()
        }
        // What it left running in its process group (a child in the background) goes with it.
        process.killAll()
        capLog()
        guard let status else {
            fail(.exits, "it was still running after \(HostCheck.runLimitSeconds) s; check-host runs a host's one-shot apply (apply what waits, then exit), not a loop")
            neverExits = true
            return false
        }
        checkWrites()
        if status != 0 {
            fail(.exits, "it exited with status \(status) (its output is in \(directory)/host.log)")
            return false
        }
        return true
    }

    mutating func runOnce() throws(AgentError) -> Bool { try finish(try spawn()) }

    /// Keeps the last MiB of what the host printed: a chatty host does not fill the disk.
    func capLog() {
        let path = "\(directory)/host.log"
        guard let info = Posix.info(path), info.size > 1 << 20,
              let fd = try? Posix.open(path, [.readWrite]) else { return }
        defer { Posix.close(fd) }
        if let tail = try? Posix.read(fd, at: info.size - (1 << 20), count: 1 << 20, path: path) {
            _ = try? Posix.truncate(fd, to: 0, path: path)
            _ = try? Posix.writeAll(fd, Array("[check-host: the host printed \(info.size) bytes; the last MiB follows]\n".utf8) + tail, at: 0, path: path)
        }
    }

    /// Runs once and checks the cart against every record.
    @discardableResult
    mutating func runAndCheck() throws(AgentError) -> Bool {
        guard try runOnce() else { return false }
        return try check(after: "its run", expectAll: true)
    }

    /// A whole run's duration (this directory is used up by it).
    mutating func measureRun() throws(AgentError) -> Double {
        let started = Date()
        let process = try spawn()
        let deadline = started.addingTimeInterval(HostCheck.runLimitSeconds)
        while process.exitStatus() == nil {
            if Interruption.requested { process.killAll(); throw HostCheck.interrupted }
            if Date() > deadline { break }
            Posix.pause(microseconds: 500)
        }
        process.killAll()
        return max(0.005, Date().timeIntervalSince(started))
    }

    /// A write into the cart in place, seen by inotify during the run.
    mutating func checkWrites() {
        let cartName = Posix.basename(of: cartPath)
        let events = (try? inotify.events()) ?? []
        let cartDirectory = Posix.dirname(of: cartPath)
        if events.contains(where: { $0.name == cartName && $0.mask.contains(.modify) && inotify.path(of: $0.watch).map { $0.hasPrefix(cartDirectory) } == true }) {
            fail(.atomic, "it wrote \(configuration.cart) in place (the file was modified, not replaced): a reader can see half a cart; write a temp file in the same directory and rename it over the cart")
        }
    }

    // MARK: Checking

    mutating func fail(_ rule: HostCheck.Rule, _ detail: String) {
        if findings.contains(where: { $0.rule == rule }) { return }
        findings.append(HostCheck.Finding(scenario: name, rule: rule, detail: detail))
    }

    /// The cart as the rules look at it; nil when it cannot be read (a finding is made).
    func leftCart() throws(AgentError) -> LeftCart? {
        guard let bytes = try? Posix.readFile(cartPath, limit: configuration.limits.maxFileBytes, follow: configuration.followSymlinks) else { return nil }
        guard let root = try? JSONParser.parse(bytes) else { return nil }
        var cart = LeftCart()
        var lines: [JSONNode] = []
        switch root.value {
        case let .array(elements):
            lines = elements
        case let .object(members):
            for member in members {
                if member.key.isByteEqual(to: keys.products), case let .array(elements) = member.node.value {
                    lines = elements
                } else if member.key.isByteEqual(to: keys.syncedThrough) {
                    cart.syncedThrough = member.node.integer.flatMap { $0 >= 0 ? UInt64($0) : nil }
                } else {
                    var writer = JSONWriter()
                    member.node.write(into: &writer)
                    cart.others[member.key] = writer.text
                }
            }
        default:
            return nil
        }
        for line in lines {
            guard case let .string(id)? = line[keys.id]?.value, let quantity = line[keys.quantity]?.integer else { continue }
            let key = ExactID(id)
            cart.quantities[key, default: 0] += quantity
            if case let .string(label)? = line["label"]?.value ?? line["hostLabel"]?.value { cart.labels[key] = label }
        }
        for (id, quantity) in cart.quantities where quantity < 0 { cart.negative.append((id, quantity)) }
        cart.quantities = cart.quantities.filter { $0.value > 0 }
        return cart
    }

    /// The records of the outbox, in seq order.
    func records() throws(AgentError) -> [OutboxRecord] {
        try engine.store.withTransaction { () throws(AgentError) in try engine.store.lines(.outbox, after: 0) }
            .compactMap { try? RecordFormat.outboxRecord($0.line) }
    }

    /// The quantities records lead to from the starting cart, as a host must apply them.
    func model(_ records: [OutboxRecord], clamp: Bool = true) -> [ExactID: Int] {
        var quantities = initial.quantities
        for record in records where record.type == .updateBasket {
            for delta in record.products {
                let id = ExactID(delta.id)
                let next = (quantities[id] ?? 0) + delta.quantity
                quantities[id] = clamp ? max(0, next) : next
            }
        }
        return clamp ? quantities.filter { $0.value > 0 } : quantities.mapValues { max(0, $0) }.filter { $0.value > 0 }
    }

    /// The starting lines that never reach 0 along the records: a host keeps them as they are.
    func stayingLines(_ records: [OutboxRecord]) -> Set<ExactID> {
        var quantities = initial.quantities
        var staying = Set(quantities.keys)
        for record in records where record.type == .updateBasket {
            for delta in record.products {
                let id = ExactID(delta.id)
                quantities[id] = max(0, (quantities[id] ?? 0) + delta.quantity)
                if quantities[id] == 0 { staying.remove(id) }
            }
        }
        return staying
    }

    static func shown(_ quantities: [ExactID: Int]) -> String {
        "{" + quantities.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ", ") + "}"
    }

    /// Checks the cart against the records; `expectAll`: every record must be applied by now.
    @discardableResult
    mutating func check(after moment: String, expectAll: Bool = false, killed: Bool = false) throws(AgentError) -> Bool {
        let all = try records()
        let last = all.last?.seq ?? 0
        let before = findings.count
        if Posix.linkInfo(cartPath)?.identity != initialIdentity { hostWroteCart = true }
        if !hostWroteCart, last > 0, !killed {
            fail(.reports, "after \(moment), \(configuration.cart) is still the cart check-host wrote: the host applied no record and reported no \"\(keys.syncedThrough)\" (it never wrote the cart)")
            return false
        }
        guard let cart = try leftCart() else {
            if Posix.linkInfo(cartPath).map({ $0.kind != .regular }) == true {
                fail(.valid, "after \(moment), \(configuration.cart) is not a regular file (a link, a FIFO…): basket-sync reads a cart that is a file\(configuration.followSymlinks ? "" : " (a link only with \"followSymlinks\")")")
                return false
            }
            if killed {
                fail(.atomic, "\(moment), it left a cart that does not parse as JSON: write a temp file and rename it over the cart, so that a crash leaves the old cart or the new one")
            } else {
                fail(.valid, "after \(moment), \(configuration.cart) does not parse as JSON")
            }
            return false
        }
        if let (id, quantity) = cart.negative.first {
            fail(.clamp, "after \(moment), line \(id) is at \(quantity): a host clamps at 0 when asked to remove more than it has (and may remove the line)")
            return false
        }
        if let bytes = try? Posix.readFile(cartPath, limit: configuration.limits.maxFileBytes, follow: configuration.followSymlinks),
           case let .failure(error) = Result(catching: { () throws(DecodingFailure) in try CartFormat.decode(bytes, keys: keys, limits: configuration.limits) }) {
            fail(.valid, "after \(moment), basket-sync rejects the cart: \(error.descriptions(path: configuration.cart, bytes: bytes).first ?? "invalid")")
            return false
        }
        // Other lines and fields: X is never in a record, labels stay with their lines.
        if cart.quantities["X"] != initial.quantities["X"] {
            fail(.keeps, "after \(moment), the line X (the shopper's, in no record) is \(cart.quantities["X"].map(String.init) ?? "gone"), it was \(initial.quantities["X"] ?? 0)")
        }
        // A line that went to 0 may have been removed and come back new, without its label.
        let kept = stayingLines(all.filter { $0.seq <= (cart.syncedThrough ?? last) })
        for (id, label) in initial.labels where kept.contains(id) && cart.quantities[id] != nil && cart.labels[id] != label {
            fail(.keeps, "after \(moment), the line \(id) lost its \"label\" field (\(label.debugDescription)); a host keeps the fields of a line it changes")
        }
        for (key, value) in initial.others where cart.others[key] != value {
            fail(.keeps, "after \(moment), the cart's field \(key.debugDescription) is \(cart.others[key] ?? "gone"), it was \(value)")
        }
        guard let claim = cart.syncedThrough else {
            fail(.reports, "after \(moment), the cart has no \"\(keys.syncedThrough)\": basket-sync cannot tell which records it processed (the cart is \(cart.shown))")
            return false
        }
        if claim > last {
            fail(.tooFar, "after \(moment), \"\(keys.syncedThrough)\" is \(claim) but the outbox ends at \(last)")
            return false
        }
        if expectAll, claim < last {
            fail(.skip, "after \(moment), \"\(keys.syncedThrough)\" is \(claim) but the outbox ends at \(last): records \(claim + 1)…\(last) were not processed")
        }
        let applied = all.filter { $0.seq <= claim }
        let expected = model(applied)
        if cart.quantities != expected {
            diagnose(cart, applied: applied, claim: claim, expected: expected, moment: moment)
        }
        return findings.count == before
    }

    /// Names the mistake that explains the cart, when one does.
    mutating func diagnose(_ cart: LeftCart, applied: [OutboxRecord], claim: UInt64, expected: [ExactID: Int], moment: String) {
        let left = cart.quantities
        let leftText = "the cart holds \(cart.shown) with \"\(keys.syncedThrough)\" \(claim)"
        let wanted = "records 1…\(claim) lead to \(Self.shown(expected))"
        let before = applied.filter { $0.seq <= claimBefore }
        let since = applied.filter { $0.seq > claimBefore }
        if model(applied + applied) == left || (!before.isEmpty && model(before + applied) == left) {
            return fail(.once, "after \(moment), \(leftText): records were applied again\(before.isEmpty ? "" : " (it had applied 1…\(claimBefore) before)"); \(wanted)")
        }
        if model(before + since.reversed()) == left || model(applied.reversed()) == left {
            return fail(.order, "after \(moment), \(leftText): the records were applied out of seq order; \(wanted)")
        }
        // One record missing: named (with those alike, which leave the same cart).
        let missing = applied.indices.filter { index in
            applied[index].type == .updateBasket && model(applied.enumerated().filter { $0.offset != index }.map(\.element)) == left
        }
        if let first = missing.first {
            let record = applied[first]
            let alike = missing.count > 1 ? " (or any of records \(missing.dropFirst().prefix(5).map { "#\(applied[$0].seq)" }.joined(separator: ", ")): leaving out any of them gives this cart)" : ""
            return fail(.skip, "after \(moment), \(leftText): record #\(record.seq) (\(record.products.map { "\($0.id) \($0.quantity > 0 ? "+" : "")\($0.quantity)" }.joined(separator: ", ")))\(alike) is missing; \(wanted)")
        }
        // One record applied twice (after the skip: when both explain the cart, a skip is the
        // likelier mistake).
        if let twice = applied.first(where: { $0.type == .updateBasket && model(applied + [$0]) == left }) {
            return fail(.once, "after \(moment), \(leftText): record #\(twice.seq) was applied twice; \(wanted)")
        }
        // Several records missing at the end: it claims more than it applied.
        for count in stride(from: applied.count - 1, through: 0, by: -1) where model(Array(applied.prefix(count))) == left {
            let through = count == 0 ? 0 : applied[count - 1].seq
            return fail(.tooFar, "after \(moment), \(leftText), but it holds only records 1…\(through); \(wanted)")
        }
        if model(applied, clamp: false) == left {
            return fail(.clamp, "after \(moment), \(leftText): a line went below 0 along the way and was not clamped there; \(wanted)")
        }
        fail(.result, "after \(moment), \(leftText); \(wanted)")
    }
}
