@testable import BasketSyncAgent
import Glibc
import TestSupport
import Testing

/// A directory read once (`Posix.listing(of:)`, how a pass reads `inbox/new/`): every name made
/// is listed once — UTF-8 names as names, sorted, the others as their bytes — whatever their
/// number (many reads of the kernel's buffer), their length (up to 255 bytes), their first byte.
@Suite struct ListingTests {
    @Test(arguments: [0, 1, 7, 3_000]) func aDirectoryIsListedWithEveryNameItHolds(count: Int) throws {
        let seed = UInt64(count) &* 0x9E37_79B9 &+ 41
        var random = SplitMix64(seed: seed)
        var template = Array("/tmp/listing-tests-XXXXXX".utf8CString)
        let directory = String(cString: mkdtemp(&template)!)
        defer { Posix.removeTree(directory) }
        var names = Set<String>()
        var unnamable = Set<[UInt8]>()
        let alphabet = Array("abcXYZ019._-é€𝄞".unicodeScalars).map(String.init)
        for index in 0..<count {
            var bytes: [UInt8]
            switch random.below(10) {
            case 0:
                // Not UTF-8: a lone continuation byte, or a byte never in UTF-8.
                bytes = Array("raw\(index)".utf8) + [random.below(2) == 0 ? 0x80 : 0xFF]
            case 1:
                // As long as a name can be: 255 bytes.
                bytes = Array("\(index)-".utf8)
                while bytes.count < 255 { bytes.append(UInt8(ascii: "a") + UInt8(random.below(26))) }
            default:
                var name = "\(index)"
                for _ in 0..<random.below(40) { name += alphabet[random.below(alphabet.count)] }
                if random.below(8) == 0 { name = "." + name }
                bytes = Array(name.utf8)
            }
            let path = Array(directory.utf8) + [0x2F] + bytes + [0]
            let fd = path.withUnsafeBufferPointer { $0.withMemoryRebound(to: CChar.self) { open($0.baseAddress!, O_WRONLY | O_CREAT | O_EXCL, 0o644) } }
            #expect(fd >= 0, "seed \(seed): cannot make \(Posix.shownBytes(bytes))")
            close(fd)
            if let name = String(validating: bytes, as: UTF8.self) { names.insert(name) } else { unnamable.insert(bytes) }
        }
        let listed = try Posix.listing(of: directory)
        let missing = names.subtracting(listed.names), extra = Set(listed.names).subtracting(names)
        #expect(missing.isEmpty && extra.isEmpty, "seed \(seed): \(missing.count) names not listed (\(missing.sorted().prefix(3))), \(extra.count) listed not made (\(extra.sorted().prefix(3)))")
        #expect(listed.names == names.sorted(), "seed \(seed): a name listed twice, or out of order")
        #expect(Set(listed.unnamable) == unnamable && listed.unnamable.count == unnamable.count, "seed \(seed)")
        // Visited one by one, as the counts and the searches read a folder: every name once
        // (those that are not UTF-8 as the replacement of their bad bytes), and a search stops
        // at the name it looks for.
        var visited: [String] = []
        Posix.eachName(in: directory) { visited.append($0); return true }
        #expect(visited.count == names.count + unnamable.count && Set(visited).isSuperset(of: names), "seed \(seed)")
        #expect(Posix.countNames(in: directory) { $0.hasPrefix(".") } == names.filter { $0.hasPrefix(".") }.count + unnamable.filter { $0.first == UInt8(ascii: ".") }.count, "seed \(seed)")
        if let wanted = names.randomElement(using: &random) {
            var seen = 0
            #expect(Posix.containsName(in: directory) { seen += 1; return $0 == wanted }, "seed \(seed)")
            #expect(seen == (visited.firstIndex(of: wanted) ?? -2) + 1, "seed \(seed): the search went on past the name")
        }
        #expect(!Posix.containsName(in: directory) { $0 == "never made" } && !Posix.containsName(in: directory + "/missing") { _ in true })
    }

    /// What is not a directory is refused as an open refuses it: named by its shape.
    @Test func whatIsNotADirectoryIsRefusedByItsShape() throws {
        var template = Array("/tmp/listing-tests-XXXXXX".utf8CString)
        let directory = String(cString: mkdtemp(&template)!)
        defer { Posix.removeTree(directory) }
        symlink("/tmp", directory + "/link")
        close(open(directory + "/file", O_WRONLY | O_CREAT, 0o644))
        for name in ["link", "file"] {
            #expect(throws: SystemError.self, "\(name)") { try Posix.listing(of: "\(directory)/\(name)") }
        }
        #expect((try? Posix.listing(of: directory + "/missing")) == nil)
    }
}
