@testable import BasketSync
import Testing
import TestSupport

/// `ExactID` against the plain definition: equal when the UTF-8 bytes are equal — over seeded
/// strings of every length around the 8-byte steps of the comparison, canonical pairs included.
@Suite struct ExactIDTests {
    static let pieces = ["a", "K", "\u{212A}", "é", "e\u{301}", "Å", "\u{212B}", "A\u{30A}", "😀", "\u{2028}", "0123456", ""]

    @Test func equalityHashAndOrderAreThoseOfTheBytes() {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        for _ in 0..<20_000 {
            func text() -> String { (0..<Int.random(in: 0...6, using: &rng)).map { _ in Self.pieces.randomElement(using: &rng)! }.joined() }
            let a = text()
            let b = Bool.random(using: &rng) ? a : text()
            let bytesEqual = Array(a.utf8) == Array(b.utf8)
            #expect(ExactID(a) == ExactID(b) ? bytesEqual : !bytesEqual, "seed \(seed): \(Array(a.utf8)) vs \(Array(b.utf8))")
            #expect(a.isByteEqual(to: b) == bytesEqual, "seed \(seed)")
            if bytesEqual { #expect(ExactID(a).hashValue == ExactID(b).hashValue, "seed \(seed)") }
            #expect((ExactID(a) < ExactID(b)) == Array(a.utf8).lexicographicallyPrecedes(Array(b.utf8)), "seed \(seed)")
        }
        #expect(ExactID("caf\u{E9}") != ExactID("cafe\u{301}") && "caf\u{E9}" == "cafe\u{301}", "String merges what ExactID keeps apart")
        #expect(Set<ExactID>(["K", "\u{212A}"]).count == 2)
    }
}
