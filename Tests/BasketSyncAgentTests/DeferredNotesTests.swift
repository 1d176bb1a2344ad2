@testable import BasketSyncAgent
import BasketSync
import Foundation
import Testing
import TestSupport

/// What a file was given, noted after its append with the next transaction (the agent's way),
/// never overwrites what another process noted since: once every note is written, the note is
/// the file as it stands, whoever appended last.
@Suite struct DeferredNotesTests {
    /// Two engines on one directory — one deferring its notes as the agent does, one noting at
    /// once as a one-shot command does — append records, flush and write their notes in a seeded
    /// order. At the end the outbox holds every record once, in order, and the note says its
    /// size and last seq (a deferred note written over a newer one would say less).
    @Test func aDeferredNoteNeverReplacesANewerOne() throws {
        let seed = Knobs.seed
        var random = SplitMix64(seed: seed)
        for round in 0..<Knobs.value("BASKET_SYNC_RUNS", default: 3) {
            let directory = try EngineTests.Directory()
            let quiet = Logger(fd: open("/dev/null", O_WRONLY))
            let agent = try SyncEngine(directory: directory.path, isSynchronizerRegistered: true, logger: quiet)
            agent.defersGivenNotes = true
            let oneShot = try SyncEngine(directory: directory.path, isSynchronizerRegistered: true, logger: quiet)
            var steps: [String] = []
            for index in 0..<120 {
                let action = random.below(6)
                steps.append(String(action))
                switch action {
                case 0, 1:
                    _ = try Commands.push(directory: directory.path, kind: .delta, products: [RetailerProduct(id: "A", quantity: 1)], id: "e\(index)")
                    _ = try (action == 0 ? agent : oneShot).pass([.inbox])
                case 2: try agent.flush()
                case 3: try oneShot.flush()
                case 4: try Store.saveDeferredGiven([agent.store])
                default: _ = try (random.below(2) == 0 ? agent : oneShot).pass(.everything)
                }
            }
            try agent.flush()
            try Store.saveDeferredGiven([agent.store])
            try oneShot.flush()
            let context = "seed \(seed), round \(round), steps \(steps.joined())"
            let seqs = directory.lines("outbox.jsonl").compactMap { line in
                (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["seq"] as? Int
            }
            let last = try oneShot.store.withTransaction { () throws(AgentError) in try oneShot.store.lastSeq(.outbox) }
            #expect(seqs == Array(stride(from: 1, through: Int(last), by: 1)), "\(context)")
            let reader = try Store(directory: directory.path, create: false)
            let note = try reader.withTransaction { () throws(AgentError) in try reader.given(.outbox) }
            let size = (try? FileManager.default.attributesOfItem(atPath: directory.path + "/outbox.jsonl")[.size] as? Int) ?? nil
            #expect(note?.seq == last && note.map { Int($0.size) } == size, "\(context): the note \(note.map(\.text) ?? "none"), the file \(size ?? -1) bytes through \(last)")
        }
    }

    /// A file rotated away (logrotate's create: NAME → NAME.1, a new empty NAME) while the note
    /// of its last append is still deferred: another process catching up reads how far NAME.1
    /// got and gives the new file only what came after.
    @Test func aFileRotatedAwayIsNotGivenItsLastRecordsAgainWhateverTheNoteSays() throws {
        let directory = try EngineTests.Directory()
        let quiet = Logger(fd: open("/dev/null", O_WRONLY))
        let agent = try SyncEngine(directory: directory.path, isSynchronizerRegistered: true, logger: quiet)
        agent.defersGivenNotes = true
        for index in 1...3 {
            _ = try Commands.push(directory: directory.path, kind: .delta, products: [RetailerProduct(id: "A", quantity: 1)], id: "e\(index)")
            _ = try agent.pass([.inbox])
        }
        #expect(!agent.store.unsavedGiven.isEmpty, "the note of the last append waits for the next commit")
        try FileManager.default.moveItem(atPath: directory.path + "/outbox.jsonl", toPath: directory.path + "/outbox.jsonl.1")
        try directory.write("outbox.jsonl", "")
        _ = try Commands.push(directory: directory.path, kind: .delta, products: [RetailerProduct(id: "A", quantity: 1)], id: "e4")
        let oneShot = try SyncEngine(directory: directory.path, isSynchronizerRegistered: true, logger: quiet)
        _ = try oneShot.pass(.everything)
        func seqs(_ name: String) -> [Int] {
            directory.lines(name).compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])?["seq"] as? Int }
        }
        #expect(seqs("outbox.jsonl.1") == [1, 2, 3])
        #expect(seqs("outbox.jsonl") == [4], "the rotated part ends at 3: the new file starts after it")
    }
}
