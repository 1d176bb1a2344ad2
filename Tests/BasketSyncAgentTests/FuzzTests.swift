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
        // Canonical-equivalent ids (NFC, NFD; `K` and the Kelvin sign): two lines, two SKUs.
        "{\"products\": [{\"id\": \"caf\u{E9}\", \"quantity\": 1}, {\"id\": \"cafe\u{301}\", \"quantity\": 5}, {\"id\": \"\u{212A}\", \"quantity\": 2}, {\"id\": \"K\", \"quantity\": 3}]}",
        #"{"id": "evt-42", "type": "basketDelta", "products": [{"id": "sku-1", "quantity": -2}]}"#,
        #"{"id": "evt-43", "type": "basketState", "products": [{"id": "sku-1", "quantity": 3}]}"#,
        #"{"id": "evt-44", "type": "basketTransfer", "transferId": "t-9", "products": []}"#,
        #"{"id": "evt-45", "type": "redirectToCart"}"#,
        #"{ "pendingTimeoutSeconds": 10, "cart": "cart.json", "keys": {"id": "id"}, "limits": {"maxQuantity": 5} } // c"#,
    ].map { Array($0.utf8) }

    static let alphabet: [UInt8] = Array("{}[]\",:\\-+.0123456789eEtrufalsn /u".utf8) + [0x00, 0x0A, 0x09, 0x7F, 0x80, 0xBF, 0xC3, 0xE9, 0xED, 0xEF, 0xF0, 0xFF]

    /// Whole tokens a mutation inserts: numbers at the limits, and what ids must survive or be
    /// refused for — C1 controls, line separators raw and escaped, combining marks, the Kelvin sign.
    static let tokens = [
        "99999999999999999999999", "-1", "1e308", "0.5", "\"\"", "null", "[[[[[[", "\"\\u0000\"",
        "\u{85}", "\\u0085", "\u{9B}", "\u{2028}", "\\u2029", "e\u{301}", "\u{E9}", "\u{212A}", "\\u212a", "\\u0301",
    ]

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
            case 4: bytes.insert(contentsOf: Array(Self.tokens.randomElement(using: &rng)!.utf8), at: position)
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
            let notification = BasketNotification(seq: 1, at: Date(timeIntervalSince1970: 1_796_032_200), products: cart.products, syncedThrough: cart.syncedThrough, basket: 1)
            let line = RecordFormat.line(notification)
            guard line.filter({ $0 == 0x0A }).count == 1, line.last == 0x0A else { return "a record of several lines" }
            guard (try? RecordFormat.notification(line)) == notification else { return "a record that does not read back" }
            if let failure = applyFollowsTheHostRule(bytes, cart) { return failure }
        } catch {
            problems += error.problems
        }
        do { _ = try EventFormat.decode(bytes, limits: InputLimits()) } catch { problems += error.problems }
        for problem in problems where problem.offset < 0 || problem.offset > bytes.count || problem.reason.isEmpty {
            return "a problem without a place or a reason: \(problem)"
        }
        do { _ = try AgentConfiguration.parse(bytes, path: "basket-sync.json", in: "/nowhere/sync") } catch {
            if error.exitCode != 78 || !error.description.hasPrefix("basket-sync.json:") { return "a configuration error without its place: \(error)" }
        }
        return nil
    }

    /// `apply`'s cart writer on an accepted cart: deltas on each of its ids (and on a new one) land
    /// as the host rule says, ids byte for byte, the result is a valid cart with no raw line
    /// separator, and the lines apply did not touch are kept.
    static func applyFollowsTheHostRule(_ bytes: [UInt8], _ cart: HostCart) -> String? {
        guard var document = try? CartDocument(bytes, keys: CartKeys(), limits: InputLimits()) else { return "an accepted cart is not a document" }
        var expected: [ExactID: Int] = [:]
        for line in cart.products { expected[ExactID(line.id), default: 0] = expected[ExactID(line.id), default: 0].saturatingAdding(line.quantity) }
        expected = expected.filter { $0.value > 0 }
        let deltas = cart.products.enumerated().map { RetailerProduct(id: $1.id, quantity: [1, -1, -3, 2][$0 % 4]) }
            + [RetailerProduct(id: "new-e\u{301}", quantity: 2)]
        for delta in deltas { document.apply(delta) }
        RetailerProduct.apply(deltas, to: &expected)
        document.setSyncedThrough(1)
        let written = document.encoded()
        for separator: [UInt8] in [[0xE2, 0x80, 0xA8], [0xE2, 0x80, 0xA9], [0xC2, 0x85]] where written.windows(separator.count).contains(where: { $0.elementsEqual(separator) }) {
            return "apply wrote a raw line separator \(separator)"
        }
        var lenient = InputLimits()
        lenient.maxQuantity = .max  // merged duplicate lines may sum past the limit (reported in the note)
        guard let back = try? CartFormat.decode(written, keys: CartKeys(), limits: lenient) else {
            return "apply wrote a cart that does not read back: \(String(decoding: written, as: UTF8.self))"
        }
        var actual: [ExactID: Int] = [:]
        for line in back.products { actual[ExactID(line.id), default: 0] = actual[ExactID(line.id), default: 0].saturatingAdding(line.quantity) }
        guard actual.filter({ $0.value > 0 }) == expected else { return "apply gave \(actual), the host rule \(expected)" }
        guard back.syncedThrough == 1 else { return "apply lost syncedThrough" }
        return nil
    }

    /// `BASKET_SYNC_FUZZ_INPUTS` sets how many (default 100,000); `BASKET_SYNC_SEED` replays one run.
    @Test func mutatedInputsNeverCrashAndAlwaysSayWhere() {
        let count = Knobs.value("BASKET_SYNC_FUZZ_INPUTS", default: 100_000)
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        var accepted = 0
        var carts = 0
        for index in 0..<count {
            let input = Self.mutate(Self.seeds.randomElement(using: &rng)!, &rng)
            if let failure = Self.check(input) {
                Issue.record("seed \(seed) (replay: BASKET_SYNC_SEED=\(seed)), input \(index) \(input): \(failure)")
                return
            }
            if (try? JSONParser.parse(input)) != nil { accepted += 1 }
            if (try? CartFormat.decode(input, keys: CartKeys(), limits: InputLimits())) != nil { carts += 1 }
        }
        print("fuzz: seed \(seed), \(count) inputs, \(accepted) parsed as JSON, \(carts) valid carts edited as apply does, none crashed or lost its place")
        #expect(accepted > 0 && accepted < count, "the mutations reach both sides")
        #expect(carts > count / 100, "apply's writer is reached")
    }
}


extension Int {
    /// `self + other`, pinned at the bounds.
    func saturatingAdding(_ other: Int) -> Int {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }
}

extension Array where Element == UInt8 {
    /// The runs of `size` consecutive bytes.
    func windows(_ size: Int) -> [ArraySlice<UInt8>] {
        count < size ? [] : (0...(count - size)).map { self[$0..<($0 + size)] }
    }
}
