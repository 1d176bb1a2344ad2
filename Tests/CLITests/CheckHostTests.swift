import Foundation
import Testing
import TestSupport

/// `check-host`, the conformance kit: every sample host holds every rule, and a host broken in
/// one way is caught for that rule and nothing else.
@Suite struct CheckHostTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    func path(_ relative: String) -> String { Self.root.appendingPathComponent(relative).path }

    /// Runs check-host with the built binaries first on the PATH (the samples call basket-sync).
    func checkHost(_ arguments: [String]) throws -> Run {
        let pathVariable = binary.deletingLastPathComponent().path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        // The scratch directories in memory where the machine has it: check-host's own fsyncs are
        // not what these tests judge, and hundreds of checks run.
        let memory = FileManager.default.isWritableFile(atPath: "/dev/shm") ? ["TMPDIR": "/dev/shm"] : [:]
        return try basketSync(arguments, environment: ["PATH": pathVariable].merging(memory) { $1 })
    }

    /// The rules the report says are broken.
    func brokenRules(_ report: String) -> [String] {
        report.split(separator: "\n").filter { $0.hasPrefix("  FAIL  ") }.map { line in
            let text = line.dropFirst("  FAIL  ".count)
            return String(text[..<(text.lastIndex(of: "(").map { text.index(before: $0) } ?? text.endIndex)])
        }
    }

    /// Where a failing report says it kept its scratch directories.
    func keptDirectory(_ report: String) -> String? {
        guard let range = report.range(of: "kept in ") else { return nil }
        return String(report[range.upperBound...].prefix { $0 != " " })
    }

    /// Debian's Python, started directly (a version manager's shim on the PATH costs a tenth of a
    /// second a start, and the hosts here start hundreds of times).
    static let python = FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") ? "/usr/bin/python3" : "python3"

    /// How many times each host is checked in the tests below: a rule caught only by chance, or a
    /// good host failed by chance, shows within them (`BASKET_SYNC_CHECK_RUNS`).
    static let runs = Knobs.value("BASKET_SYNC_CHECK_RUNS", default: 10)

    /// A host that keeps at 0 the lines it brings to 0 (docs/integrating.md: remove the line or
    /// keep it at 0) holds every rule in every scenario, run after run — the same-id lines too:
    /// its lines are the rule's followed by the lines it keeps at 0.
    @Test func aHostThatKeepsALineAtZeroHoldsEveryRule() throws {
        let playground = try Playground()
        for seed in 1...Self.runs {
            let run = try checkHost(["-C", playground.path, "check-host", "--seed", String(seed), "--",
                                     CheckHostTests.python, path("Tests/Support/broken-host.py"), "keepzero"])
            #expect(run.status == 0, "seed \(seed):\n\(run.stdout)\n\(run.stderr)")
            if run.status != 0 { break }
        }
    }

    /// The reference apply and both sample hosts hold every rule in every scenario, run after
    /// run (seeds 1…runs: a failure names its seed).
    @Test(arguments: ["basket-sync apply", "Samples/shell-host", "Samples/legacy-format"])
    func theReferenceAndTheSampleHostsHoldEveryRule(name: String) throws {
        let playground = try Playground()
        let (command, settings): ([String], String) = switch name {
        case "basket-sync apply": ([binary.path, "apply"], playground.path)
        case "Samples/shell-host": ([path("Samples/shell-host/host.sh"), "sync"], playground.path)
        default: ([CheckHostTests.python, path("Samples/legacy-format/host.py"), "--once", "."], path("Samples/legacy-format"))
        }
        // Seed 1 runs every scenario; the others the scenarios a seed or the timing changes (the
        // rest are the same records every time).
        for seed in 1...Self.runs {
            let scenarios = seed == 1 ? [] : ["--scenarios", "many,arriving,crash"]
            let run = try checkHost(["-C", settings, "check-host", "--seed", String(seed)] + scenarios + ["--"] + command)
            #expect(run.status == 0, "\(name), seed \(seed):\n\(run.stdout)\n\(run.stderr)")
            #expect(run.stdout.contains("every rule holds in \(seed == 1 ? 11 : 3) scenario(s)"), "\(name), seed \(seed):\n\(run.stdout)")
            if run.status != 0 { break }
        }
    }

    /// Each broken host is caught for its one rule, every time (seeds 1…runs), by the scenario
    /// made for it — and only for that rule; `--json` says it for a script.
    @Test(arguments: [
        ("twice", "replay", "once"),
        ("skip", "rotated", "skip"),
        ("reverse", "many", "order"),
        ("noclamp", "past-zero", "clamp"),
        // Each SKU's deltas summed, then clamped: D 1 −2 +2 is 1, not 2.
        ("net", "past-zero-then-add", "clamp"),
        ("noneg", "past-zero", "removals"),
        // Records taken by line number: once the outbox rotated, those of the rotated file are
        // left out and later ones applied — a skip, said with how records are taken.
        ("linenumber", "rotated", "skip"),
        // syncedThrough written in a cart of its own before the lines: seen on the cart it
        // replaces 20 ms later, not by a kill that happens to land between.
        ("ackfirst", "new-and-existing", "acknowledgesWithLines"),
        // The lines first, syncedThrough in a cart of its own 20 ms later: killed between, the
        // next run applies them again.
        ("acklast", "new-and-existing", "acknowledgesWithLines"),
        ("inplace", "new-and-existing", "atomic"),
        ("toofar", "new-and-existing", "tooFar"),
        ("nosynced", "replay", "reports"),
        // Ids rewritten to NFC: café as NFD merged into café as NFC, the ohm sign made omega.
        ("normalize", "unicode-ids", "exactIds"),
        // An id on two lines: each line moved by the delta, not their sum (units doubled); an
        // increase put on the last line; a decrease taken from the first; a line at 0 the
        // records never touched removed.
        ("everyline", "same-id-lines", "result"),
        ("lastline", "same-id-lines", "placement"),
        ("firstdecrease", "same-id-lines", "placement"),
        ("dropzero", "same-id-lines", "placement"),
        // An increase on the first line above 0 (not the first line).
        ("firstnonzero", "same-id-lines", "placement"),
        // Ids with the spaces around them cut: " B " merged into B.
        ("trim", "same-id-lines", "result"),
    ])
    func aBrokenHostIsCaughtEveryTime(mode: String, scenario: String, rule: String) throws {
        let playground = try Playground()
        for seed in 1...Self.runs {
            let run = try checkHost(["-C", playground.path, "check-host", "--json", "--seed", String(seed), "--scenarios", scenario, "--",
                                     CheckHostTests.python, path("Tests/Support/broken-host.py"), mode])
            #expect(run.status == 65, "\(mode), seed \(seed): \(run.stderr)")
            let report = try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any]
            let rules = (report?["rules"] as? [[String: Any]]) ?? []
            let broken = rules.filter { $0["ok"] as? Bool == false }.compactMap { $0["rule"] as? String }
            #expect(broken == [rule], "\(mode), seed \(seed): \(run.stdout)")
            #expect(report?["passed"] as? Bool == false && report?["seed"] as? Int == seed)
            if let kept = report?["scratch"] as? String { try? FileManager.default.removeItem(atPath: kept) }
            if broken != [rule] { break }
        }
    }

    @Test(arguments: [
        ("twice", "applies each record once"),
        ("noclamp", "clamps a line at 0, record by record"),
        ("net", "clamps a line at 0, record by record"),
        ("noneg", "applies removals (negative deltas)"),
        ("ackfirst", "writes syncedThrough in the same cart as the lines it covers (never before, never after)"),
        ("acklast", "writes syncedThrough in the same cart as the lines it covers (never before, never after)"),
        ("linenumber", "skips no record"),
        ("losefields", "keeps other lines and fields"),
        // The lines written back in another order: every other line stays in its place.
        ("reorder", "keeps other lines and fields"),
        ("inplace", "writes the cart atomically (a temp file renamed over it)"),
        ("nosynced", "reports syncedThrough"),
        // Applies the records after the cart's syncedThrough and writes it back unchanged: every
        // run applies them all again — blamed for the claim, not for what follows from it.
        ("frozen", "reports syncedThrough"),
        // With nothing new, it writes syncedThrough one lower: a claim never moves back.
        ("backwards", "reports syncedThrough"),
        ("toofar", "reports syncedThrough no further than what it applied"),
        // Applies the first half of what it read and claims it all — killed, it looks like
        // ackfirst killed between its two carts; a whole run tells them apart.
        ("claimhalf", "reports syncedThrough no further than what it applied"),
        ("reverse", "applies records in seq order"),
        ("skip", "skips no record"),
        ("normalize", "keeps ids byte for byte (no Unicode normalization)"),
        // Records arrive all through the run: a host that claims what it has not applied yet.
        ("raceack", "reports syncedThrough no further than what it applied"),
        // A cart that is a link out of the directory is not followed.
        ("linkout", "leaves a cart basket-sync can read"),
        // A redirect not counted in syncedThrough.
        ("noredirect", "skips no record"),
        // Records 3, 8, 13, … left out, those after them applied: holes, however many.
        ("skipmany", "skips no record"),
        // A host that never writes the cart breaks "reports syncedThrough"; the rules about the
        // carts it writes are not judged (rather than passed).
        ("nothing", "reports syncedThrough"),
        // A host that only ever writes a cart that does not parse breaks "leaves a cart
        // basket-sync can read"; the rules about what a cart holds are not judged.
        ("garbage", "leaves a cart basket-sync can read"),
    ])
    func aBrokenHostIsCaughtForItsRuleAndNothingElse(mode: String, rule: String) throws {
        let playground = try Playground()
        // A host killed mid-write that leaves garbage is told from a torn write by nothing: the
        // garbage writer is checked on the scenarios that run it to its end.
        let scenarios = mode == "garbage" ? ["--scenarios", "new-and-existing,past-zero,many,rotated,redirect,replay,arriving"] : []
        let run = try checkHost(["-C", playground.path, "check-host"] + scenarios + ["--", CheckHostTests.python, path("Tests/Support/broken-host.py"), mode])
        #expect(run.status == 65, "\(mode): \(run.stderr)")
        #expect(brokenRules(run.stdout) == [rule], "\(mode) (the report's first line has the seed to replay):\n\(run.stdout)")
        #expect(!run.stdout.contains("SECRET-XYZ"), "nothing outside is read into the report")
        #expect(run.stdout.contains("(not judged: the host never wrote the cart)") == (mode == "nothing"), "\(mode):\n\(run.stdout)")
        #expect(run.stdout.contains("--    applies each record once (not judged: the host never left a cart basket-sync reads)") == ["garbage", "linkout"].contains(mode), "\(mode):\n\(run.stdout)")
        let kept = keptDirectory(run.stdout)
        #expect(kept.map { FileManager.default.fileExists(atPath: $0) } == true, "the scratch directories are kept for a look")
        if let kept { try? FileManager.default.removeItem(atPath: kept) }
    }

    /// A host that fails at once, never writing the cart, breaks "runs to its end" and
    /// "reports syncedThrough" — the rules about the carts it writes are not judged.
    @Test func aHostThatFailsAtOnceReportsNothing() throws {
        let playground = try Playground()
        let run = try checkHost(["-C", playground.path, "check-host", "--", CheckHostTests.python, path("Tests/Support/broken-host.py"), "fails"])
        #expect(run.status == 65, "\(run.stderr)")
        #expect(brokenRules(run.stdout) == ["runs to its end (exit 0) within the time limit", "reports syncedThrough"], "\(run.stdout)")
        if let kept = keptDirectory(run.stdout) { try? FileManager.default.removeItem(atPath: kept) }
    }

    /// An atomic host whose cart is over limits.maxFileBytes: the cart is rejected for its size,
    /// said as such — not taken for a torn write, even when the host is killed.
    @Test func aCartOverTheLimitIsSaidSoNotTakenForATornWrite() throws {
        let playground = try Playground()
        try playground.write("basket-sync.json", "{\"limits\": {\"maxFileBytes\": 65536}}")
        let run = try checkHost(["-C", playground.path, "check-host", "--", CheckHostTests.python, path("Tests/Support/broken-host.py"), "huge"])
        #expect(run.status == 65, "\(run.stderr)")
        #expect(brokenRules(run.stdout) == ["leaves a cart basket-sync can read"], "\(run.stdout)")
        #expect(run.stdout.contains("over \"limits.maxFileBytes\" (65536)"), "\(run.stdout)")
        if let kept = keptDirectory(run.stdout) { try? FileManager.default.removeItem(atPath: kept) }
    }

    /// Runs killed at random instants are judged by what the cart holds, never by a guess: a
    /// host that leaves a record out is not taken for one acknowledging ahead of its lines when
    /// records alike or adding up to it hide it, nor the other way round. Seeds 7, 15 and 33 draw
    /// such records (without a line of each record's own, the record left out would pass
    /// unseen, for records out of order, or for an acknowledgement ahead of its lines); then a
    /// run of the suite's seed (a failure names it).
    @Test(arguments: [("skip", "skips no record"),
                      ("ackfirst", "writes syncedThrough in the same cart as the lines it covers (never before, never after)"),
                      ("acklast", "writes syncedThrough in the same cart as the lines it covers (never before, never after)"),
                      // Its claim never moves: killed, it looks like acklast killed between its
                      // two carts; a whole run tells them apart.
                      ("frozen", "reports syncedThrough"),
                      ("claimhalf", "reports syncedThrough no further than what it applied")])
    func aKilledHostIsCaughtForItsOwnRule(mode: String, rule: String) throws {
        let playground = try Playground()
        let base = Knobs.seed
        for seed in [7, 15, 33] + (0..<UInt64(Self.runs)).map({ base &+ $0 }) {
            let run = try checkHost(["-C", playground.path, "check-host", "--seed", String(seed), "--scenarios", "crash", "--",
                                     CheckHostTests.python, path("Tests/Support/broken-host.py"), mode])
            #expect(brokenRules(run.stdout) == [rule], "\(mode), seed \(seed):\n\(run.stdout)")
            if let kept = keptDirectory(run.stdout) { try? FileManager.default.removeItem(atPath: kept) }
            if brokenRules(run.stdout) != [rule] { break }
        }
    }

    @Test func theSameSeedReplaysTheSameReport() throws {
        let playground = try Playground()
        let arguments = ["-C", playground.path, "check-host", "--seed", "7", "--scenarios", "many", "--", CheckHostTests.python, path("Tests/Support/broken-host.py"), "reverse"]
        let first = try checkHost(arguments)
        let second = try checkHost(arguments)
        func findings(_ run: Run) -> [String] { run.stdout.split(separator: "\n").filter { $0.hasPrefix("FAIL ") }.map(String.init) }
        #expect(!findings(first).isEmpty)
        #expect(findings(first) == findings(second), "the many scenario's records come from the seed")
        for run in [first, second] {
            if let kept = keptDirectory(run.stdout) { try? FileManager.default.removeItem(atPath: kept) }
        }
    }

    /// A relative command is relative to -C's
    /// directory; what a host leaves running is stopped; a host that never exits ends the check.
    @Test func aRelativeHostItsChildrenAndAHostThatNeverExits() throws {
        let playground = try Playground()
        try FileManager.default.copyItem(atPath: path("Tests/Support/broken-host.py"), toPath: playground.path + "/my-host.py")
        let relative = try checkHost(["-C", playground.path, "check-host", "--scenarios", "new-and-existing,replay", "--", "./my-host.py", "background"])
        #expect(relative.status == 0, "\(relative.stdout)\n\(relative.stderr)")
        let leftovers = try basketSync(["-f", "sleep 299.5"], executable: "/usr/bin/pgrep")
        #expect(leftovers.stdout.isEmpty, "the host's background children are stopped with it: \(leftovers.stdout)")

        let forever = try checkHost(["-C", playground.path, "check-host", "--limit", "0.5", "--", "sleep", "600"])
        #expect(forever.status == 65)
        #expect(forever.stdout.contains("FAIL  new-and-existing: runs to its end (exit 0) within the time limit: it was still running after"), "\(forever.stdout)")
        #expect(!forever.stdout.contains("past-zero"), "the check ends at the first run that never exits: \(forever.stdout)")
        if let kept = keptDirectory(forever.stdout) { try? FileManager.default.removeItem(atPath: kept) }
    }

    @Test func usageErrors() throws {
        let playground = try Playground()
        let noCommand = try checkHost(["-C", playground.path, "check-host"])
        #expect(noCommand.status == 64)
        #expect(noCommand.stderr.contains("check-host needs the host's apply command after --"))
        let unknown = try checkHost(["-C", playground.path, "check-host", "--scenarios", "many,nope", "--", "true"])
        #expect(unknown.status == 64)
        #expect(unknown.stderr.contains("no scenario \"nope\"; the scenarios are new-and-existing, past-zero, past-zero-then-add, many, rotated, redirect, replay, arriving, crash, unicode-ids, same-id-lines"))
        let missing = try checkHost(["-C", playground.path, "check-host", "--scenarios", "redirect", "--", playground.path + "/no-such-host"])
        #expect(missing.status == 66, "\(missing.stderr)")
        #expect(missing.stderr.contains("cannot run \(playground.path)/no-such-host"))
        let silent = try checkHost(["-C", playground.path, "check-host", "--scenarios", "redirect", "--", "true"])
        #expect(silent.status == 65)
        #expect(silent.stdout.contains("FAIL  redirect: reports syncedThrough: after its run, cart.json is still the cart check-host wrote"), "a host that does nothing: \(silent.stdout)")
        if let kept = keptDirectory(silent.stdout) { try? FileManager.default.removeItem(atPath: kept) }
        // A tree's root: the host of one cart is checked; the message names the root given.
        let tree = try Playground()
        #expect(try basketSync(["-C", tree.path, "init", "--tree"]).status == 0)
        let root = try checkHost(["-C", tree.path, "check-host", "--", "true"])
        #expect(root.status == 64 && root.stderr.contains("\(tree.path): is a tree of carts") && root.stderr.contains("-C \(tree.path)/CART-ID check-host"), "\(root.stderr)")
    }
}

extension CheckHostTests {
    /// A scenario list that names none is a usage error (64), never a pass for any host; a name
    /// given twice runs once.
    @Test func aScenarioListNamingNoneIsRefusedAndANameTwiceRunsOnce() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        for list in ["", ",", " , "] {
            let run = try checkHost(["-C", playground.path, "check-host", "--scenarios", list, "--", "/bin/true"])
            #expect(run.status == 64 && run.stderr.contains("--scenarios names no scenario"), "[\(list)] \(run)")
        }
        let twice = try checkHost(["-C", playground.path, "check-host", "--scenarios", "replay,replay", "--", binary.path, "apply"])
        #expect(twice.status == 0 && twice.stdout.contains("every rule holds in 1 scenario(s)"), "\(twice)")
    }

    /// A sync directory whose database lives elsewhere (`"database"`, for a share) is checked in
    /// scratch directories with databases of their own: the reference host passes, and the
    /// directory's own database is never opened.
    @Test func aDirectoryWithItsDatabaseElsewhereIsCheckedWithoutIt() throws {
        let playground = try Playground()
        let database = playground.path + "/local/shop1"
        try FileManager.default.createDirectory(atPath: playground.path + "/local", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: playground.path + "/share", withIntermediateDirectories: true)
        try playground.write("share/basket-sync.json", "{\"database\": \"\(database)\"}")
        #expect(try basketSync(["-C", playground.path + "/share", "init"]).status == 0)
        func files() throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: database).sorted().map { name in
                let attributes = try FileManager.default.attributesOfItem(atPath: database + "/" + name)
                return "\(name) \(attributes[.size] ?? 0) \(attributes[.modificationDate] ?? 0)"
            }
        }
        let before = try files()
        let run = try checkHost(["-C", playground.path + "/share", "check-host", "--scenarios", "replay,new-and-existing", "--", binary.path, "apply"])
        #expect(run.status == 0 && run.stdout.contains("every rule holds in 2 scenario(s)"), "\(run)")
        #expect(try files() == before, "the directory's own database untouched")
    }
}
