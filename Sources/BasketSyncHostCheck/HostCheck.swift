import BasketSync
import BasketSyncAgent
import BasketSyncWire
import Seeded

/// `check-host`: the conformance kit. A host's own apply command is run against scripted
/// scenarios, each in a scratch sync directory of its own with the host's settings (key names,
/// cart path), and what it leaves is compared with what the outbox records lead to.
public enum HostCheck {
    /// What a host must do with the outbox (docs/spec.md §3 and §5).
    public enum Rule: String, CaseIterable, Sendable {
        /// The rule's name in `--json`: the case's name.
        public var key: String { String(describing: self) }

        case exits = "runs to its end (exit 0) within the time limit"
        case valid = "leaves a cart basket-sync can read"
        case atomic = "writes the cart atomically (a temp file renamed over it)"
        case keeps = "keeps other lines and fields"
        case exactIds = "keeps ids byte for byte (no Unicode normalization)"
        case clamp = "clamps a line at 0, record by record"
        case removals = "applies removals (negative deltas)"
        case reports = "reports syncedThrough"
        case tooFar = "reports syncedThrough no further than what it applied"
        case acknowledgesWithLines = "writes syncedThrough in the same cart as the lines it covers (never before, never after)"
        case once = "applies each record once"
        case order = "applies records in seq order"
        case skip = "skips no record"
        case result = "leaves the quantities the records lead to"
        case placement = "moves an id's lines as little as it can (an increase on its first line, a decrease from its last line back)"
    }

    /// The scenarios' names, in the order they run.
    public static var scenarioNames: [String] { Scenario.allCases.map(\.rawValue) }

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
        /// Whether the host left a cart basket-sync reads in at least one scenario: the rules about
        /// what a cart holds are judged only then (a host that writes only garbage breaks the
        /// rule of a readable cart, and is not said to keep lines or apply records once).
        public var hostLeftReadableCart = false
        /// Every rule holds.
        public var passed: Bool { findings.isEmpty }

        /// Whether `rule` was judged: the rules about the carts a host writes are judged only
        /// when it wrote one, the rules about what a cart holds only when it left one basket-sync
        /// reads (a host that never wrote the cart broke the rule of reporting syncedThrough).
        public func judged(_ rule: Rule) -> Bool {
            if rule == .exits || findings.contains(where: { $0.rule == rule }) { return true }
            if [.valid, .atomic].contains(rule) { return hostWroteCart }
            if rule == .reports, !hostWroteCart { return true }
            return hostLeftReadableCart
        }

        /// Why `rule` was not judged, for people.
        func whyNotJudged(_ rule: Rule) -> String {
            hostWroteCart && ![.valid, .atomic].contains(rule) ? "the host never left a cart basket-sync reads" : "the host never wrote the cart"
        }

        /// The report for scripts and CI: one JSON object — `passed`, `seed`, the command, each
        /// scenario with `ok`, each rule with `ok` (null: not judged) and the scenarios breaking
        /// it, each finding, and the scratch directories kept (null when every rule holds).
        public var json: String {
            var writer = JSONWriter()
            writer.object { object in
                object.member("passed", passed)
                object.member("seed", seed)
                object.member("command") { $0.array(command) { $0.string($1) } }
                object.member("scenarios") { writer in
                    writer.array(scenarios) { writer, scenario in
                        writer.object { $0.member("name", scenario); $0.member("ok", !findings.contains { $0.scenario == scenario }) }
                    }
                }
                object.member("rules") { writer in
                    writer.array(Rule.allCases) { writer, rule in
                        writer.object { member in
                            member.member("rule", rule.key)
                            member.member("text", rule.rawValue)
                            let broken = findings.filter { $0.rule == rule }.map(\.scenario)
                            if judged(rule) { member.member("ok", broken.isEmpty) } else { member.member("ok") { $0.raw("null") } }
                            member.member("scenarios") { $0.array(broken) { $0.string($1) } }
                        }
                    }
                }
                object.member("findings") { writer in
                    writer.array(findings) { writer, finding in
                        writer.object { member in
                            member.member("scenario", finding.scenario)
                            member.member("rule", finding.rule.key)
                            member.member("detail", finding.detail)
                        }
                    }
                }
                if passed { object.member("scratch") { $0.raw("null") } } else { object.member("scratch", scratch) }
            }
            return writer.text
        }

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
                } else if !judged(rule) {
                    lines.append("  --    \(rule.rawValue) (not judged: \(whyNotJudged(rule)))")
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
    public static let defaultRunLimitSeconds = 30.0

    /// Runs the scenarios against `command`, with the settings of `directory` (its
    /// `basket-sync.json`, when it has one).
    public static func run(directory: String, command: [String], scenarios: [String]?, seed: UInt64?, limit: Double? = nil) throws(AgentError) -> Report {
        var command = command
        // As with git -C, a relative path is relative to where the command runs (the sync
        // directory with -C), not to the scratch directory the host runs in.
        if command[0].contains("/"), !command[0].hasPrefix("/") {
            command[0] = (Posix.currentDirectory() ?? ".") + "/" + command[0]
        }
        // Each scenario once, in the order given; none at all would pass any host.
        var chosen: [Scenario] = []
        for name in scenarios ?? scenarioNames {
            guard let scenario = Scenario(rawValue: name) else {
                throw .usage("check-host: no scenario \(JSONWriter.quoted(name)); the scenarios are \(scenarioNames.joined(separator: ", "))")
            }
            if !chosen.contains(scenario) { chosen.append(scenario) }
        }
        guard !chosen.isEmpty else {
            throw .usage("check-host: --scenarios names no scenario; give some of \(scenarioNames.joined(separator: ", ")), or leave --scenarios out to run them all")
        }
        let settings = try Posix.readFile("\(directory)/\(AgentConfiguration.fileName)", limit: 1 << 20, follow: true)
        let configuration = try settings.map { (bytes) throws(AgentError) in try AgentConfiguration.parse(bytes, path: "\(directory)/\(AgentConfiguration.fileName)", in: directory) } ?? AgentConfiguration()
        // A host serves one cart: a tree's root is named as every one-cart command names it.
        if configuration.isTree {
            throw .usage("\(directory): is a tree of carts; check-host checks the host of one cart, with the tree's settings: basket-sync -C \(directory)/CART-ID check-host -- CMD")
        }
        let base = Posix.environment("TMPDIR").flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        let scratch: String
        do { scratch = try Posix.makeTemporaryDirectory("\(base)/basket-sync-check-XXXXXX") } catch { throw .system(error) }
        let seed = seed ?? UInt64.random(in: 1...999_999)
        var report = Report(command: command, scenarios: chosen.map(\.rawValue), seed: seed, scratch: scratch)
        let inotify: Inotify
        do { inotify = try Inotify(path: scratch) } catch { throw .system(error) }
        var random = SplitMix64(seed: seed)
        Interruption.catchSignals()
        do {
            for scenario in chosen {
                var check = try ScenarioRun(name: scenario.rawValue, root: scratch, settings: scenario.settings(settings, configuration: configuration), configuration: configuration,
                                            command: command, inotify: inotify, runLimit: limit ?? defaultRunLimitSeconds)
                try check.play(scenario, random: &random)
                report.findings += check.findings
                report.hostWroteCart = report.hostWroteCart || check.hostWroteCart
                report.hostLeftReadableCart = report.hostLeftReadableCart || check.hostLeftReadableCart
                if check.neverExits {
                    report.scenarios = Array(chosen.prefix { $0 != scenario }.map(\.rawValue)) + [scenario.rawValue]
                    break
                }
            }
        } catch {
            // The check itself could not go on (the command cannot run, the disk is full): no report.
            Posix.removeTree(scratch)
            throw error
        }
        // A host that wrote no cart in any scenario reported no syncedThrough, whatever else it broke.
        if !report.hostWroteCart, !report.findings.contains(where: { $0.rule == .reports }), let first = report.scenarios.first {
            report.findings.append(Finding(scenario: first, rule: .reports, detail: "the host never wrote \(configuration.cart) in any scenario: it applied no record and reported no \"\(configuration.keys.syncedThrough)\""))
        }
        if report.passed { Posix.removeTree(scratch) }
        return report
    }
}
