@testable import BasketSyncAgent
import Glibc
import Testing
import TestSupport

/// How a pinned folder's path (`/proc/self/fd/N/...`) is reached and named, by bytes, against a
/// model written from what the doc comments say, on seeded paths: pinned folders' files, the
/// folder itself (`/.`), the link (no `/` after N), descriptors that are not remembered, ten
/// digits or more, repeated `/./`, non-ASCII names, the prefix inside a longer text.
@Suite struct PinnedPathTests {
    /// Descriptors no other test remembers (tests run at once in one process and remember their
    /// real descriptors: a number below 70,000 here could be one of theirs).
    static let remembered: [Int32: String] = [123_456_789: "/srv/tree/c1", 98_765_432: "/srv/tree/é"]

    static func path(_ rng: inout SplitMix64) -> String {
        let pieces = ["/proc/self/fd/", "123456789", "98765432", "555555555", "0123456789", "70000", "/", "./", "/.", ".", "cart.json", "é", "x y", "see ", "\u{301}"]
        return (0..<Int.random(in: 1...7, using: &rng)).map { _ in pieces[Int.random(in: 0..<pieces.count, using: &rng)] }.joined()
    }

    /// `/proc/self/fd/N/./REST` is (N, REST), `/proc/self/fd/N/.` is (N, "."), anything else is
    /// itself from the working directory; N has one to nine digits.
    static func modelReached(_ path: String) -> (Int32, String) {
        let prefix = "/proc/self/fd/"
        guard path.utf8.starts(with: prefix.utf8) else { return (AT_FDCWD, path) }
        var rest = Array(path.utf8.dropFirst(prefix.utf8.count))
        let digits = rest.prefix { $0 >= 0x30 && $0 <= 0x39 }
        guard !digits.isEmpty, digits.count < 10, let fd = Int32(String(decoding: digits, as: UTF8.self)) else { return (AT_FDCWD, path) }
        rest.removeFirst(digits.count)
        guard rest.first == 0x2F else { return (AT_FDCWD, path) }
        while rest.starts(with: Array("/./".utf8)) { rest.removeFirst(2) }
        rest.removeFirst()
        return (fd, rest.isEmpty ? "." : String(decoding: rest, as: UTF8.self))
    }

    /// Every `/proc/self/fd/N` of a remembered folder is its name (`/.` after it, as a whole
    /// component, goes with it); the rest is left as it is.
    static func modelNamed(_ text: String) -> String {
        let prefix = Array("/proc/self/fd/".utf8)
        let bytes = Array(text.utf8)
        var out: [UInt8] = []
        var index = 0
        while index < bytes.count {
            guard bytes[index...].starts(with: prefix) else {
                out.append(bytes[index])
                index += 1
                continue
            }
            var end = index + prefix.count
            while end < bytes.count, bytes[end] >= 0x30, bytes[end] <= 0x39 { end += 1 }
            guard let fd = Int32(String(decoding: bytes[(index + prefix.count)..<end], as: UTF8.self)), let name = remembered[fd] else {
                out += prefix
                index += prefix.count
                continue
            }
            out += Array(name.utf8)
            index = end
            if bytes[index...].starts(with: Array("/.".utf8)), index + 2 == bytes.count || bytes[index + 2] == 0x2F { index += 2 }
        }
        return String(decoding: out, as: UTF8.self)
    }

    @Test func pinnedPathsAreReachedAndNamedAsTheirDescriptorsSay() {
        for (fd, name) in Self.remembered { PinnedNames.remember(fd, as: name) }
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        for _ in 0..<5_000 {
            let path = Self.path(&rng)
            let reached = Posix.reached(path)
            let model = Self.modelReached(path)
            #expect(reached.directory == model.0 && reached.relative == model.1, "seed \(seed): \(path)")
            #expect(PinnedNames.named(path).utf8.elementsEqual(Self.modelNamed(path).utf8), "seed \(seed): \(path)")
        }
    }
}
