import Foundation
import Testing

/// docs/commands.md is the built binary's help texts as scripts/commands-doc prints them, byte for
/// byte: a help text changed without the page, or the page edited by hand, fails here.
@Suite struct CommandsDocTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func theCommandsPageIsTheBinarysHelpTexts() throws {
        let script = Self.root.appendingPathComponent("scripts/commands-doc").path
        let generated = try basketSync([binary.path], executable: script)
        #expect(generated.status == 0, "scripts/commands-doc \(binary.path) failed (\(generated.status)): \(generated.stderr)")
        let page = try Data(contentsOf: Self.root.appendingPathComponent("docs/commands.md"))
        let matches = Data(generated.stdout.utf8) == page
        if !matches {
            let expected = generated.stdout.split(separator: "\n", omittingEmptySubsequences: false)
            let found = String(decoding: page, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
            let common = min(expected.count, found.count)
            let line = (0..<common).first { !expected[$0].utf8.elementsEqual(found[$0].utf8) } ?? common
            let want = line < expected.count ? String(expected[line]) : "(end of output)"
            let have = line < found.count ? String(found[line]) : "(end of file)"
            print("docs/commands.md differs from the help texts at line \(line + 1): the binary says \(want.debugDescription), the page \(have.debugDescription)")
            print("run scripts/commands-doc .build/debug/basket-sync > docs/commands.md")
        }
        #expect(matches, "docs/commands.md is not the binary's help texts: run scripts/commands-doc .build/debug/basket-sync > docs/commands.md")
    }
}
