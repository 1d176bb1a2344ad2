@testable import BasketSyncAgent
import BasketSync
import Foundation
import Testing
import TestSupport

/// The engine, the store and the projections in-process, on real files and a real SQLite database.
@Suite struct EngineTests {
    final class Directory {
        let path: String
        init() throws {
            var template = Array((FileManager.default.temporaryDirectory.path + "/basket-sync-engine-XXXXXX").utf8CString)
            guard mkdtemp(&template) != nil else { throw CocoaError(.fileWriteUnknown) }
            path = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
            _ = try Commands.initialize(directory: path)
        }
        deinit { try? FileManager.default.removeItem(atPath: path) }

        func write(_ name: String, _ text: String) throws { try Data(text.utf8).write(to: URL(fileURLWithPath: "\(path)/\(name)")) }
        func read(_ name: String) -> String { (try? String(contentsOfFile: "\(path)/\(name)", encoding: .utf8)) ?? "" }
        func lines(_ name: String) -> [String] { read(name).split(separator: "\n").map(String.init) }
    }

    let quiet = Logger(fd: open("/dev/null", O_WRONLY))

    func engine(_ directory: Directory, registered: Bool = true) throws -> SyncEngine {
        try SyncEngine(directory: directory.path, isSynchronizerRegistered: registered, logger: quiet)
    }

    /// A cart on a file system that keeps times in whole seconds (ext4 with small inodes, many
    /// NFS servers), changed within the last two seconds, may still be rewritten in place in that
    /// second without its size or times moving: such a version is not remembered as the one at a
    /// record. Only then: finer times, or a change further back, are.
    @Test func aVersionWithWholeSecondTimesMayChangeUnseenOnlyWithinItsSecond() {
        let second: Int64 = 1_000_000_000
        let now: Int64 = 1_796_000_000 * second + 400_000_000
        func identity(modified: Int64, changed: Int64) -> FileIdentity {
            FileIdentity(device: 1, inode: 2, size: 30, modified: modified, changed: changed)
        }
        let coarse = 1_796_000_000 * second
        #expect(identity(modified: coarse, changed: coarse).mayChangeUnseen(nowNanoseconds: now))
        #expect(identity(modified: coarse - second, changed: coarse - second).mayChangeUnseen(nowNanoseconds: now))
        #expect(!identity(modified: coarse - 3 * second, changed: coarse - 3 * second).mayChangeUnseen(nowNanoseconds: now))
        #expect(!identity(modified: coarse, changed: coarse + 123).mayChangeUnseen(nowNanoseconds: now))
        #expect(!identity(modified: coarse + 5, changed: coarse).mayChangeUnseen(nowNanoseconds: now))
    }

    /// A group of events shares one transaction and saves the state once at its end: it must end
    /// exactly where taking the same events one by one ends — the same outbox lines, the same
    /// state (pending batches, counters, transfers, ids taken). Seeded: deltas, states,
    /// transfers (some landing twice), redirects, redeliveries of an id; more than one group.
    @Test func eventsTakenInGroupsEndWhereTakingThemOneByOneEnds() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        let grouped = try Directory(), oneByOne = try Directory()
        let groupedEngine = try engine(grouped), oneByOneEngine = try engine(oneByOne)
        let count = Int.random(in: 200...(SyncEngine.inboxGroupSize * 2 + 50), using: &rng)
        for index in 0..<count {
            let products = (0..<Int.random(in: 1...3, using: &rng)).map { _ in
                RetailerProduct(id: ["A", "B", "café", "cafe\u{301}", "Z"].randomElement(using: &rng)!, quantity: Int.random(in: -3...4, using: &rng))
            }
            let kind: Commands.PushKind = switch Int.random(in: 0..<10, using: &rng) {
            case 0: .state(basket: nil)
            case 1: .transfer("t\(Int.random(in: 0..<5, using: &rng))")
            case 2: .redirect
            default: .delta
            }
            let absolute = products.map { RetailerProduct(id: $0.id, quantity: abs($0.quantity)) }
            let given = kind == .delta ? products : kind == .redirect ? [] : absolute
            // Now and then an id delivered again (the second delivery acknowledged, not done again).
            let id = Int.random(in: 0..<12, using: &rng) == 0 && index > 0 ? "e\(Int.random(in: 0..<index, using: &rng))" : "e\(index)"
            for directory in [grouped, oneByOne] { _ = try Commands.push(directory: directory.path, kind: kind, products: given, id: id) }
            _ = try oneByOneEngine.takeInbox()
        }
        _ = try groupedEngine.takeInbox()
        func comparable(_ state: SyncState) -> SyncState {
            var state = state
            state.syncId = ""
            for index in state.pending.indices { state.pending[index].at = Date(timeIntervalSince1970: 0); state.pending[index].deadline = nil }
            for index in state.rolledBack.indices { state.rolledBack[index].at = Date(timeIntervalSince1970: 0); state.rolledBack[index].deadline = nil }
            return state
        }
        func lines(_ directory: Directory, _ syncId: String) -> [String] {
            directory.lines("outbox.jsonl").map { line in
                line.replacingOccurrences(of: syncId, with: "ID").replacingOccurrences(of: #""at":"[^"]*""#, with: "", options: .regularExpression)
            }
        }
        let groupedState = try groupedEngine.currentState(), oneByOneState = try oneByOneEngine.currentState()
        #expect(lines(grouped, groupedState.syncId) == lines(oneByOne, oneByOneState.syncId), "seed \(seed): BASKET_SYNC_SEED=\(seed) replays")
        #expect(comparable(groupedState) == comparable(oneByOneState), "seed \(seed): BASKET_SYNC_SEED=\(seed) replays")
        #expect(groupedState.lastOutboxSeq > 0, "seed \(seed)")
        // And a process that opens the database now reads the state the group saved.
        #expect(comparable(try engine(grouped).currentState()) == comparable(oneByOneState), "seed \(seed)")
    }

    @Test func aTornTailIsCutAndEveryMissingRecordWrittenAgainFromTheDatabase() throws {
        let directory = try Directory()
        let first = try engine(directory)
        for index in 1...3 { _ = try Commands.push(directory: directory.path, kind: .delta, products: [RetailerProduct(id: "A", quantity: index)], id: "e\(index)") }
        #expect(try first.takeInbox().taken == 3)
        let complete = directory.lines("outbox.jsonl")
        #expect(complete.count == 3)

        // A crash mid-append leaves a torn line; a power loss may also lose an un-fsynced tail.
        try directory.write("outbox.jsonl", complete[0] + "\n" + complete[1].prefix(20))
        let restarted = try engine(directory)
        try restarted.publishAll()
        #expect(directory.lines("outbox.jsonl") == complete)
        #expect(directory.read("outbox.jsonl").hasSuffix("}\n"))
    }

    @Test func twoProcessesShareOneDatabaseWithoutLosingOrRepeatingASeq() throws {
        let directory = try Directory()
        let agent = try engine(directory)
        let oneShot = try engine(directory)
        for index in 0..<10 {
            _ = try Commands.push(directory: directory.path, kind: .delta, products: [RetailerProduct(id: "A", quantity: 1)], id: "e\(index)")
            _ = try (index % 2 == 0 ? agent : oneShot).takeInbox()
        }
        let seqs = directory.lines("outbox.jsonl").map { line in
            Int(line.dropFirst("{\"seq\":".count).prefix { $0.isNumber })!
        }
        #expect(seqs == Array(1...10))
        #expect(try agent.currentState().lastOutboxSeq == 10, "the agent sees the other process's commits")
    }

    /// A cart keeps its last 1,000 reports, newest first, and never many more (the oldest go
    /// once in a while, not at every report).
    @Test func aCartKeepsItsLastThousandReportsAndNotManyMore() throws {
        let directory = try Directory()
        let store = try engine(directory).store
        for index in 0..<2_500 {
            try store.withTransaction { () throws(AgentError) in try store.report(level: "info", message: "r\(index)", at: Date()) }
            if index % 100 == 99 {
                let count = try store.withTransaction { () throws(AgentError) in try store.reports(limit: 10_000).count }
                #expect(count <= 1_063, "after \(index + 1) reports")
            }
        }
        let kept = try store.withTransaction { () throws(AgentError) in try store.reports(limit: 10_000) }
        #expect(kept.count >= 1_000 && kept.count <= 1_063)
        #expect(Array(kept.map(\.message).prefix(1_000)) == (1_500..<2_500).reversed().map { "r\($0)" })
    }

    /// What a file was given is read under its lock: a process whose memory of it is stale (the
    /// other process appended since) never appends again what the other wrote, even behind a
    /// foreign line.
    @Test func aStaleMemoryOfWhatAFileWasGivenNeverAppendsTwice() throws {
        let directory = try Directory()
        let agent = try engine(directory)
        let oneShot = try engine(directory)
        _ = try Commands.push(directory: directory.path, kind: .delta, products: [RetailerProduct(id: "A", quantity: 1)], id: "e0")
        _ = try agent.takeInbox()
        _ = try Commands.push(directory: directory.path, kind: .delta, products: [RetailerProduct(id: "A", quantity: 1)], id: "e1")
        _ = try oneShot.takeInbox()
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: directory.path + "/outbox.jsonl"))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("{\"note\":\"the host's own line\"}\n".utf8))
        try handle.close()
        try agent.publishAll()
        let seqs = directory.lines("outbox.jsonl").compactMap { line in Int(line.dropFirst("{\"seq\":".count).prefix { $0.isNumber }) }
        #expect(seqs == [1, 2], "\(directory.read("outbox.jsonl"))")
    }

    @Test func aMissingCartWaitsAnUnchangedOneIsSkippedAndALinkIsFollowedOnlyWhenAsked() throws {
        let directory = try Directory()
        let sync = try engine(directory)
        #expect(try sync.takeCart() == .missing)
        try directory.write("cart.json", "[{\"id\":\"A\",\"quantity\":1}]")
        #expect(try sync.takeCart() == .taken)
        #expect(try sync.takeCart() == .unchanged)

        try directory.write("real.json", "[{\"id\":\"A\",\"quantity\":2}]")
        try FileManager.default.removeItem(atPath: "\(directory.path)/cart.json")
        try FileManager.default.createSymbolicLink(atPath: "\(directory.path)/cart.json", withDestinationPath: "real.json")
        guard case let .rejected(error) = try sync.takeCart() else {
            Issue.record("a symbolic link was followed without followSymlinks")
            return
        }
        #expect(error.description.contains("followSymlinks"))
        try directory.write("basket-sync.json", "{\"followSymlinks\": true}")
        try sync.reloadConfiguration()
        #expect(try sync.takeCart() == .taken)
    }

    @Test func theStateDirectoryIsPrivate() throws {
        let directory = try Directory()
        let attributes = try FileManager.default.attributesOfItem(atPath: "\(directory.path)/.basket-sync")
        #expect((attributes[.posixPermissions] as? Int) == 0o700)
    }

    @Test func aHugeCartIsRejectedByTheSizeLimit() throws {
        let directory = try Directory()
        try directory.write("basket-sync.json", "{\"limits\": {\"maxFileBytes\": 64}}")
        let sync = try engine(directory)
        try directory.write("cart.json", "[" + Array(repeating: "{\"id\":\"A\",\"quantity\":1}", count: 10).joined(separator: ",") + "]")
        guard case let .rejected(error) = try sync.takeCart() else {
            Issue.record("a cart over the limit was taken")
            return
        }
        #expect(error.exitCode == 65)
        #expect(error.description.hasSuffix("cart.json: 241 bytes is over the limit of 64; raise limits.maxFileBytes in basket-sync.json if this is intended"))
    }
}

extension EngineTests {
    @Test func somethingThatIsNotAnEventFileIsSetAsideAndTheEventsBehindGoOn() throws {
        let directory = try Directory()
        let sync = try engine(directory)
        try FileManager.default.createDirectory(atPath: "\(directory.path)/inbox/new/0000-a-directory", withIntermediateDirectories: true)
        _ = try Commands.push(directory: directory.path, kind: .delta, products: [RetailerProduct(id: "A", quantity: 1)], id: "e1")
        let summary = try sync.takeInbox()
        #expect(summary.bad == 1)
        #expect(summary.taken == 1)
        #expect(FileManager.default.fileExists(atPath: "\(directory.path)/inbox/bad/0000-a-directory.error"))
        #expect(directory.lines("outbox.jsonl").count == 1)
    }
}

extension EngineTests {
    /// The host cart the contract makes of a cart's lines: per id, the sum of its lines'
    /// quantities, the ids at 0 left out.
    static func hostCart(of lines: [(id: String, quantity: Int)]) -> [ExactID: Int] {
        var sums: [ExactID: Int] = [:]
        for line in lines { sums[ExactID(line.id), default: 0] += line.quantity }
        return sums.filter { $0.value > 0 }
    }
}

extension EngineTests {
    /// A large cart is read by its changed lines and its host cart saved as its changes (the
    /// whole cart written again once they are many): after every version the host cart is what
    /// the contract says — per id, the sum of its lines' quantities, the ids at 0 left out — in
    /// the engine and in an engine opened afresh on the database. Seeded versions: quantities
    /// changed, lines added, removed, written twice or at 0, and now and then most lines at once.
    @Test func aLargeCartReadByItsChangesKeepsTheHostCartTheLinesAddUpTo() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        let directory = try Directory()
        let sync = try engine(directory)
        var lines: [(id: String, quantity: Int)] = (0..<3_000).map { ("sku-\($0 % 2_600)", Int.random(in: 0...9, using: &rng)) }
        func model() -> [ExactID: Int] { Self.hostCart(of: lines) }
        var savedAsChanges = 0, savedWhole = 0
        for round in 0..<40 {
            if round > 0 {
                for _ in 0..<Int.random(in: 1...6, using: &rng) {
                    let at = Int.random(in: 0..<lines.count, using: &rng)
                    switch Int.random(in: 0..<6, using: &rng) {
                    case 0: lines[at].quantity = Int.random(in: 0...9, using: &rng)
                    case 1: lines.insert(("new-\(Int.random(in: 0...50, using: &rng))", Int.random(in: 0...9, using: &rng)), at: at)
                    case 2: lines.remove(at: at)
                    case 3: lines.insert(lines[at], at: Int.random(in: 0..<lines.count, using: &rng))
                    case 4: lines[at].quantity = 0
                    default: if Int.random(in: 0..<4, using: &rng) == 0 { for index in lines.indices where Bool.random(using: &rng) { lines[index].quantity = Int.random(in: 0...9, using: &rng) } }
                    }
                }
            }
            // For a few versions, a line whose id is written with an escape: the one-pass reader
            // leaves that cart to the tree decoder, and the next version is read whole again.
            if round == 20 { lines.insert(("escA", 2), at: lines.count / 2) }
            if round == 24, let index = lines.firstIndex(where: { $0.id == "escA" }) { lines.remove(at: index) }
            let text = "{\"products\": [" + lines.map { "{\"id\": \"\($0.id == "escA" ? "esc\\u0041" : $0.id)\", \"quantity\": \($0.quantity)}" }.joined(separator: ",\n") + "]}"
            try directory.write("cart.json.tmp", text)
            #expect(rename("\(directory.path)/cart.json.tmp", "\(directory.path)/cart.json") == 0)
            #expect(try sync.takeCart() != .missing)
            #expect(try sync.currentState().hostCart == model(), "seed \(seed) round \(round)")
            if try sync.store.metaBlob(.hostCartChanges) != nil { savedAsChanges += 1 } else { savedWhole += 1 }
            if round % 8 == 7 {
                #expect(try engine(directory).currentState().hostCart == model(), "seed \(seed) round \(round): the host cart read back from the database")
            }
        }
        #expect(sync.largeCart != nil, "the cart was not read by its changes")
        #expect(savedAsChanges > 10 && savedWhole > 0, "seed \(seed): \(savedAsChanges) versions saved as changes, \(savedWhole) whole")
    }

    /// A small cart (read whole) is saved as the ids that changed since the state it was taken
    /// against: after every seeded version — quantities changed, lines added, removed, written
    /// twice or at 0, the cart emptied — the host cart read back by an engine opened afresh is
    /// the one the lines add up to.
    @Test func aSmallCartSavedAsItsChangesReadsBackAsItsLinesAddUp() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        let directory = try Directory()
        let sync = try engine(directory)
        var lines: [(id: String, quantity: Int)] = (0..<20).map { ("sku-\($0 % 16)", Int.random(in: 0...9, using: &rng)) }
        func model() -> [ExactID: Int] { Self.hostCart(of: lines) }
        var savedAsChanges = 0
        for round in 0..<60 {
            if round > 0 {
                for _ in 0..<Int.random(in: 1...3, using: &rng) {
                    let at = Int.random(in: 0..<max(1, lines.count), using: &rng)
                    switch lines.isEmpty ? 1 : Int.random(in: 0..<7, using: &rng) {
                    case 0: lines[at].quantity = Int.random(in: 0...9, using: &rng)
                    case 1: lines.insert(("new-\(Int.random(in: 0...30, using: &rng))", Int.random(in: 0...9, using: &rng)), at: min(at, lines.count))
                    case 2: lines.remove(at: at)
                    case 3: lines.insert(lines[at], at: Int.random(in: 0..<lines.count, using: &rng))
                    case 4: lines[at].quantity = 0
                    case 5: if Int.random(in: 0..<10, using: &rng) == 0 { lines = [] }
                    default: break
                    }
                }
            }
            let text = "{\"products\": [" + lines.map { "{\"id\": \"\($0.id)\", \"quantity\": \($0.quantity)}" }.joined(separator: ",") + "]}"
            try directory.write("cart.json.tmp", text)
            #expect(rename("\(directory.path)/cart.json.tmp", "\(directory.path)/cart.json") == 0)
            _ = try sync.takeCart()
            if try sync.store.metaBlob(.hostCartChanges) != nil { savedAsChanges += 1 }
            #expect(try engine(directory).currentState().hostCart == model(), "seed \(seed) round \(round): the host cart read back from the database")
        }
        #expect(savedAsChanges > 30, "seed \(seed): \(savedAsChanges) of 60 versions saved as changes")
    }
}

extension EngineTests {
    /// While inotify watches `new/` (a wake-up given), an entry listed before its report waits for
    /// a later wake-up: its report places it, whatever the listing or the change times say; one
    /// still without a report then is taken before what is reported, by change time. Without a
    /// wake-up (a start, a poll) everything listed is taken at once.
    @Test func anEntryListedBeforeItsReportIsPlacedByItsReport() throws {
        let directory = try Directory()
        let sync = try engine(directory)
        let names = (1...5).map { "1796000000.M00000\($0)P1Q\($0).test" }
        func deliver(_ index: Int) throws {
            try directory.write("inbox/tmp/\(names[index - 1])", "{\"id\":\"e\(index)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"A\",\"quantity\":1}]}")
            #expect(rename("\(directory.path)/inbox/tmp/\(names[index - 1])", "\(directory.path)/inbox/new/\(names[index - 1])") == 0)
        }
        func sources() -> [String] {
            directory.lines("outbox.jsonl").compactMap { line in
                line.firstRange(of: "\"source\":\"").map { String(line[$0.upperBound...].prefix { $0 != "\"" }) }
            }
        }
        for index in 1...4 { try deliver(index) }
        // Wake-up 1 read the report of e1 only: e2, e3, e4 were listed before theirs.
        var summary = try sync.takeInbox(seen: [names[0]], wakeup: 1, reported: true)
        #expect((summary.taken, summary.held) == (1, 3))
        #expect(sources() == ["e1"])
        // Another turn in the same wake-up: no report read since, nothing more taken.
        summary = try sync.takeInbox(seen: [], wakeup: 1, reported: true)
        #expect((summary.taken, summary.held) == (0, 3))
        // Wake-up 2 reads e4's report, then e3's: e2's never comes (lost with a backlog), so e2
        // goes first; e4 and e3 in their reports' order, though their names and times say otherwise.
        summary = try sync.takeInbox(seen: [names[3], names[2]], wakeup: 2, reported: true)
        #expect((summary.taken, summary.held) == (3, 0))
        #expect(sources() == ["e1", "e2", "e4", "e3"])
        // No wake-up (nothing watches): taken at once, by the listing.
        try deliver(5)
        summary = try sync.takeInbox()
        #expect((summary.taken, summary.held) == (1, 0))
        #expect(sources() == ["e1", "e2", "e4", "e3", "e5"])
    }
}

extension EngineTests {
    /// An unfinished last line (no newline) is cut only when it is a record of basket-sync torn
    /// by a crash: the start of the record due next, byte for byte, a byte zeroed aside (as a
    /// power cut may leave it). Any other unfinished line is another program's: left alone, ended
    /// with a newline before the next record, and not taken as given while nothing is appended
    /// (it may still be being written). Seeded: the tail's length, zeroed bytes, a changed byte.
    @Test func anUnfinishedLineIsCutOnlyWhenItIsARecordTornByACrash() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        for round in 0..<40 {
            let directory = try Directory()
            let first = try engine(directory)
            for index in 1...4 { _ = try Commands.push(directory: directory.path, kind: .delta, products: [RetailerProduct(id: "A", quantity: index)], id: "e\(index)") }
            #expect(try first.takeInbox().taken == 4)
            let complete = directory.lines("outbox.jsonl")
            let next = Array((complete[3] + "\n").utf8)
            // The file as a crash mid-append of record 4 left it, or with another program's
            // unfinished line where record 4's would be.
            var tail = Array(next.prefix(Int.random(in: 1..<next.count, using: &rng)))
            let ours = Bool.random(using: &rng)
            for index in tail.indices where Int.random(in: 0..<8, using: &rng) == 0 { tail[index] = 0 }
            if !ours {
                let index = Int.random(in: tail.indices, using: &rng)
                tail[index] = next[index] == UInt8(ascii: "x") ? UInt8(ascii: "y") : UInt8(ascii: "x")
            }
            let before = complete.prefix(3).joined(separator: "\n") + "\n"
            try Data(before.utf8 + tail).write(to: URL(fileURLWithPath: "\(directory.path)/outbox.jsonl"))
            let restarted = try engine(directory)
            try restarted.publishAll()
            let file = directory.read("outbox.jsonl")
            let context = "seed \(seed) (replay: BASKET_SYNC_SEED=\(seed)), round \(round), tail \(tail)"
            let expected = ours ? complete.joined(separator: "\n") + "\n" : String(decoding: Array(before.utf8) + tail + [0x0A] + next, as: UTF8.self)
            #expect(file == expected, ours ? "cut and written again: \(context)" : "left alone, ended, record 4 after it: \(context)")
        }
        // Nothing to append: the unfinished line is left as it is, and ended only when the next
        // record comes — after the rest of it, if its writer finished it meanwhile.
        let directory = try Directory()
        let sync = try engine(directory)
        _ = try Commands.push(directory: directory.path, kind: .delta, products: [RetailerProduct(id: "A", quantity: 1)], id: "e1")
        #expect(try sync.takeInbox().taken == 1)
        let handle = try #require(FileHandle(forWritingAtPath: "\(directory.path)/outbox.jsonl"))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("{\"host\":".utf8))
        try sync.publishAll()
        #expect(directory.read("outbox.jsonl").hasSuffix("}\n{\"host\":"), "left as it is")
        try handle.write(contentsOf: Data("\"note\"}".utf8))
        try handle.close()
        _ = try Commands.push(directory: directory.path, kind: .delta, products: [RetailerProduct(id: "A", quantity: 2)], id: "e2")
        #expect(try sync.takeInbox().taken == 1)
        let lines = directory.lines("outbox.jsonl")
        #expect(lines.count == 3 && lines[1] == "{\"host\":\"note\"}" && lines[2].contains("\"seq\":2"), "\(lines)")
    }
}
