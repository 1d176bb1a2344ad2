@testable import BasketSyncAgent
@testable import BasketSyncWire
import BasketSync
import Foundation
import Testing
import TestSupport

/// Hostile input, mutated at random from valid seeds and kept as a corpus of minimized cases.
@Suite struct FuzzTests {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Corpus")

    /// Every corpus file gives exactly the error (or the "valid") kept beside it.
    @Test func theCorpusGivesItsExactErrors() throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: Self.corpus.path).filter { $0.hasSuffix(".json") }.sorted()
        #expect(names.count >= 20)
        for name in names {
            let path = Self.corpus.appendingPathComponent(name).path
            let expected = try String(contentsOfFile: path.replacingOccurrences(of: ".json", with: ".expected"), encoding: .utf8)
            let kind: Commands.FileKind = name.hasPrefix("event-") ? .event : .cart
            let problems = try Commands.validate(path: path, kind: kind, directory: Self.corpus.path)
                .map { $0.replacingOccurrences(of: Self.corpus.path + "/", with: "") }
            let output = (problems.isEmpty ? ["\(name): valid"] : problems).joined(separator: "\n") + "\n"
            #expect(output == expected, "\(name)")
        }
    }

    static let seeds: [[UInt8]] = [
        #"{"products": [{"id": "sku-1", "quantity": 2}, {"id": "sku-7", "quantity": 1}], "syncedThrough": 17}"#,
        #"[{"id": "a\"b\\c\u00e9\ud83d\ude00", "quantity": 0}]"#,
        #"{"id": "evt-42", "type": "basketDelta", "products": [{"id": "sku-1", "quantity": -2}]}"#,
        #"{"id": "evt-43", "type": "basketState", "products": [{"id": "sku-1", "quantity": 3}]}"#,
        #"{"id": "evt-44", "type": "basketTransfer", "transferId": "t-9", "products": []}"#,
        #"{"id": "evt-45", "type": "redirectToCart"}"#,
        #"{ "pendingTimeoutSeconds": 10, "cart": "cart.json", "keys": {"id": "id"}, "limits": {"maxQuantity": 5} } // c"#,
    ].map { Array($0.utf8) }

    static let alphabet: [UInt8] = Array("{}[]\",:\\-+.0123456789eEtrufalsn /u".utf8) + [0x00, 0x0A, 0x09, 0x7F, 0x80, 0xBF, 0xC3, 0xE9, 0xED, 0xEF, 0xF0, 0xFF]

    static func mutate(_ input: [UInt8], _ rng: inout SplitMix64) -> [UInt8] {
        var bytes = input
        for _ in 0..<Int.random(in: 1...4, using: &rng) {
            let position = bytes.isEmpty ? 0 : Int.random(in: 0..<bytes.count, using: &rng)
            switch Int.random(in: 0..<8, using: &rng) {
            case 0 where !bytes.isEmpty: bytes[position] = alphabet.randomElement(using: &rng)!
            case 1: bytes.insert(alphabet.randomElement(using: &rng)!, at: position)
            case 2 where !bytes.isEmpty: bytes.removeSubrange(position..<min(bytes.count, position + Int.random(in: 1...8, using: &rng)))
            case 3 where !bytes.isEmpty:
                let end = min(bytes.count, position + Int.random(in: 1...16, using: &rng))
                bytes.insert(contentsOf: bytes[position..<end], at: position)
            case 4: bytes.insert(contentsOf: Array(["99999999999999999999999", "-1", "1e308", "0.5", "\"\"", "null", "[[[[[[", "\"\\u0000\""].randomElement(using: &rng)!.utf8), at: position)
            case 5:
                let other = seeds.randomElement(using: &rng)!
                let cut = Int.random(in: 0...other.count, using: &rng)
                bytes = Array(bytes[..<position]) + other[cut...]
            case 6: bytes = Array(repeating: UInt8(ascii: "["), count: Int.random(in: 60...200, using: &rng)) + bytes
            default: bytes.swapAt(position, Int.random(in: 0..<max(1, bytes.count), using: &rng))
            }
        }
        return bytes
    }

    /// Parses and decodes as a cart, an event and a configuration; checks what must always hold.
    static func check(_ bytes: [UInt8]) -> String? {
        var problems: [JSONProblem] = []
        do {
            let cart = try CartFormat.decode(bytes, keys: CartKeys(), limits: InputLimits())
            // Accepted: what it would notify is one line that reads back the same.
            let notification = BasketNotification(seq: 1, at: Date(timeIntervalSince1970: 1_796_032_200), products: cart.products, syncedThrough: cart.syncedThrough)
            let line = RecordFormat.line(notification)
            guard line.filter({ $0 == 0x0A }).count == 1, line.last == 0x0A else { return "a record of several lines" }
            guard (try? RecordFormat.notification(line)) == notification else { return "a record that does not read back" }
        } catch {
            problems += error.problems
        }
        do { _ = try EventFormat.decode(bytes, limits: InputLimits()) } catch { problems += error.problems }
        for problem in problems where problem.offset < 0 || problem.offset > bytes.count || problem.reason.isEmpty {
            return "a problem without a place or a reason: \(problem)"
        }
        do { _ = try AgentConfiguration.parse(bytes, path: "basket-sync.json") } catch {
            if error.exitCode != 78 || !error.description.hasPrefix("basket-sync.json:") { return "a configuration error without its place: \(error)" }
        }
        return nil
    }

    /// `BASKET_SYNC_FUZZ_INPUTS` sets how many (default 100,000); `BASKET_SYNC_SEED` replays one run.
    @Test func mutatedInputsNeverCrashAndAlwaysSayWhere() {
        let count = Knobs.value("BASKET_SYNC_FUZZ_INPUTS", default: 100_000)
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        var accepted = 0
        for index in 0..<count {
            let input = Self.mutate(Self.seeds.randomElement(using: &rng)!, &rng)
            if let failure = Self.check(input) {
                Issue.record("seed \(seed) (replay: BASKET_SYNC_SEED=\(seed)), input \(index) \(input): \(failure)")
                return
            }
            if (try? JSONParser.parse(input)) != nil { accepted += 1 }
        }
        print("fuzz: seed \(seed), \(count) inputs, \(accepted) parsed as JSON, none crashed or lost its place")
        #expect(accepted > 0 && accepted < count, "the mutations reach both sides")
    }
}

