import BasketSync
import BasketSyncAgent
import BasketSyncWire
import Seeded

/// The scripted scenarios, in the order they run: each a cart, records, and runs of the host.
public enum Scenario: String, CaseIterable, Sendable {
    /// Records on lines the cart holds and on new ones.
    case newAndExisting = "new-and-existing"
    /// Removals past 0: the host clamps.
    case pastZero = "past-zero"
    /// A removal past 0, then an addition on the same line: clamped record by record, not after
    /// summing a SKU's deltas.
    case pastZeroThenAdd = "past-zero-then-add"
    /// Forty seeded records: order and each once.
    case many
    /// The outbox rotated every few hundred bytes, whatever the settings: records are taken by
    /// seq, not by line number, and none hides in a rotated file.
    case rotated
    /// `redirectToCart` records among the deltas, one last.
    case redirect
    /// A second run with nothing new changes nothing.
    case replay
    /// Records arriving while the host runs: its claim says what it took.
    case arriving
    /// Runs killed at seeded instants: nothing twice, nothing torn.
    case crash
    /// Ids that Unicode normalization would change or merge (`café` as NFC and as NFD, the ohm
    /// sign): compared byte for byte, they are different SKUs.
    case unicodeIds = "unicode-ids"
    /// An id on two lines adds up: a delta moves the sum (an increase on its first line, a
    /// decrease from its last line back), never each line; an id with spaces around it is a
    /// SKU of its own (never trimmed into another).
    case sameIdLines = "same-id-lines"
}

extension Scenario {
    /// The settings a scenario's scratch directory gets: the host's (`settings`, parsed as
    /// `configuration`), with the outbox rotated every 300 bytes for `rotated`.
    func settings(_ settings: [UInt8]?, configuration: AgentConfiguration) -> [UInt8]? {
        // A scratch directory keeps its database in its own `.basket-sync/`: the directory that
        // `"database"` names serves the real sync directory alone (another is refused there).
        var scratch = configuration
        scratch.database = nil
        if self == .rotated { scratch.rotate = AgentConfiguration.Rotation(maxBytes: 300, keep: 1000) }
        return self == .rotated || configuration.database != nil ? Array(scratch.fileText.utf8) : settings
    }
}

extension ScenarioRun {
    /// Plays `scenario` here: sets up the cart, pushes records, runs the host and judges it.
    mutating func play(_ scenario: Scenario, random: inout SplitMix64) throws(AgentError) {
        switch scenario {
        case .unicodeIds:
            // NFC and NFD of one word, and a sign NFC maps to another letter: four SKUs.
            try start(["X": 1, "caf\u{E9}": 2, "cafe\u{301}": 1, "\u{2126}": 1])
            try push([("cafe\u{301}", 1), ("caf\u{E9}", -1), ("cre\u{300}me", 2)])
            try push([("\u{2126}", 1), ("\u{3A9}", 1)])
            try runAndCheck()
        case .sameIdLines:
            // A [1, 2] +1 → [2, 2] (on its first line; moving each line makes 5, on the last
            // [1, 3]); D [1, 2] −1 → [1, 1] (from its last line; from the first, [2]); C [0, 3]
            // −1 → [0, 2] (its line at 0 stays); " B " beside B stays its own. Each record's
            // SKUs differ, so that a host summing per SKU or reversing the records is judged by
            // its own rule alone.
            // E [0, 2] +1 → [1, 2] (its first line, though at 0); F [1, 2, 1] −2 → [1, 1] (its
            // last line brought to 0 leaves, then its middle one).
            try start(["X": 1, "A": 1, "A": 2, "D": 1, "D": 2, "C": 0, "C": 3, "B": 1, " B ": 1, "E": 0, "E": 2, "F": 1, "F": 2, "F": 1])
            try push([("A", 1), ("E", 1)])
            try push([("D", -1), ("C", -1), (" B ", 1), ("F", -2)])
            try runAndCheck()
        case .newAndExisting:
            try start(["X": 1, "A": 1])
            try push([("A", 2), ("B", 1)])
            try runAndCheck()
        case .pastZero:
            try start(["X": 1, "A": 1, "D": 2])
            try push([("A", -3), ("C", -1), ("D", -1)])
            try runAndCheck()
        case .pastZeroThenAdd:
            // In seq order: D 1 → 0 → 2 and A 1 → 2 → 0. Summed per SKU first, D would be 1.
            try start(["X": 1, "A": 1, "D": 1])
            try push([("D", -2), ("A", 1)])
            try push([("D", 2), ("A", -3)])
            try runAndCheck()
        case .rotated:
            try start(["X": 1, "A": 2])
            try push([("A", 1)])
            try push([("B", 1)])
            try push([("A", -1)])
            guard try runAndCheck() else { return }
            for deltas in [[("B", 1)], [("C", 2)], [("A", 1)], [("C", -1)], [("B", -1)], [("D", 1)]] { try push(deltas) }
            try check(afterRun: "its second run, the outbox rotated since")
        case .many:
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
        case .redirect:
            try start(["X": 1])
            try push([("A", 1)])
            try pushRedirect()
            try push([("A", 1)])
            // Last, a redirect: a host that does not count it in syncedThrough is shown it for ever.
            try pushRedirect()
            try runAndCheck()
        case .replay:
            try start(["X": 1, "A": 1])
            try push([("A", 2)])
            try push([("A", -1), ("B", 2)])
            guard try runAndCheck() else { return }
            let before = try leftCart()
            guard try runOnce() else { return }
            guard let after = try leftCart(), let before else { return }
            if after.quantities != before.quantities {
                fail(.once, "run again with nothing new, it changed the cart's lines from \(before.shown) to \(after.shown) (syncedThrough \(before.syncedThrough.map(String.init) ?? "none") → \(after.syncedThrough.map(String.init) ?? "none")); a host skips the records up to its syncedThrough")
            } else if after.syncedThrough != before.syncedThrough {
                // The lines stayed: the claim alone moved (back, past the outbox, or away).
                try check(after: "its second run, with nothing new", expectAll: true)
            }
        case .arriving:
            // How long a run takes, on a twin directory made the same way.
            var twin = try ScenarioRun(name: "arriving-measure", root: Posix.dirname(of: directory), settings: settings,
                                       configuration: configuration, command: command, inotify: inotify, runLimit: runLimit)
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
                    observe()
                    Posix.pause(microseconds: min(500, interval - slept))
                    slept += 500
                }
            }
            guard try finish(process) else { return }
            guard try check(after: "its first run, with records arriving") else { return }
            guard try runOnce() else { return }
            try check(after: "a second run", expectAll: true)
        case .crash:
            // Never below 0 either: this scenario is about a run killed midway, not clamping.
            // Each record adds a line of its own (R01…R20, see ``ScenarioRun/push(_:)``): two
            // records alike, or the last records adding up to an earlier one, would make a record
            // left out look like an acknowledgement ahead of its lines.
            var holding = ["A": 5, "B": 0, "C": 0, "D": 0]
            let batches = (1...20).map { _ in randomDeltas(&random, holding: &holding) }
            // How long a whole run takes, measured on a twin directory made the same way (a copy
            // would open and close this database's files, and closing drops this process's locks).
            var twin = try ScenarioRun(name: "crash-measure", root: Posix.dirname(of: directory), settings: settings,
                                       configuration: configuration, command: command, inotify: inotify, runLimit: runLimit)
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
                    observe()
                    Posix.pause(microseconds: min(200, delay - waited))
                    waited += 200
                }
                process.killAll()
                observe()
                guard try check(after: "killed (SIGKILL) \(Double(delay) / 1000) ms into run \(round)", killed: true) else { break }
            }
            if let late = lateAcknowledgement {
                // Killed on a cart whose claim and lines disagree: a host that writes one of them
                // in a later cart (killed between the two), or one whose claim is wrong whole runs
                // long (never moving, covering records it never applies). A whole run on a twin
                // made the same way tells: what it finds is the host's mistake; nothing, and the
                // cart the kill left is.
                var whole = try ScenarioRun(name: "crash-whole", root: Posix.dirname(of: directory), settings: settings,
                                            configuration: configuration, command: command, inotify: inotify, runLimit: runLimit)
                try whole.start(["X": 1, "A": 5])
                for deltas in batches { try whole.push(deltas) }
                if try whole.runOnce() { try whole.check(after: "a whole run (not killed)", expectAll: true) }
                if whole.findings.isEmpty { fail(.acknowledgesWithLines, late) }
                for finding in whole.findings { fail(finding.rule, finding.detail) }
                neverExits = whole.neverExits
                return
            }
            guard findings.isEmpty, try runOnce() else { return }
            try check(after: "a run after the kills", expectAll: true)
        }
    }
}
