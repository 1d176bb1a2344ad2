import Foundation
import Testing

/// The manual page and the bash completion are made from the help texts: every command `--help`
/// lists is in both, the page renders without a groff warning, the completion completes.
@Suite struct ManualTests {
    /// The commands `basket-sync --help` lists.
    func listedCommands() throws -> [String] {
        let help = try basketSync(["--help"]).stdout
        let lines = help.split(separator: "\n", omittingEmptySubsequences: false)
        guard let start = lines.firstIndex(of: "commands:") else { return [] }
        return lines[(start + 1)...].prefix { !$0.isEmpty }.compactMap { $0.split(separator: " ").first.map(String.init) }
    }

    @Test func theManualPageHasEveryCommandOfHelpAndRendersWithoutWarnings() throws {
        let commands = try listedCommands()
        #expect(commands.count >= 14, "\(commands)")
        let page = try basketSync(["man"])
        #expect(page.status == 0)
        let headings = page.stdout.split(separator: "\n").filter { $0.hasPrefix(".SS ") }.map { $0.dropFirst(4).replacingOccurrences(of: "\\-", with: "-") }
        #expect(headings == commands, "the page's commands \(headings), --help's \(commands)")
        for section in ["NAME", "SYNOPSIS", "FILES", "EXIT STATUS", "ENVIRONMENT", "SIGNALS"] {
            #expect(page.stdout.contains(".SH \(section)"), "no \(section) section")
        }
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/groff") else {
            print("ManualTests: groff is not installed (apt-get install groff-base): the page is not rendered")
            return
        }
        let playground = try Playground()
        try playground.write("basket-sync.1", page.stdout)
        let render = Child()
        render.executableURL = URL(fileURLWithPath: "/usr/bin/groff")
        render.arguments = ["-ww", "-man", "-Tutf8", playground.url("basket-sync.1").path]
        let errors = Pipe()
        render.standardOutput = FileHandle.nullDevice
        render.standardError = errors
        try render.run()
        let warnings = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        render.waitUntilExit()
        #expect(render.terminationStatus == 0 && warnings.isEmpty, "groff: \(warnings)")
    }

    @Test func theBashCompletionCompletesCommandsAndEachCommandsOptions() throws {
        let commands = try listedCommands()
        let script = try basketSync(["completion", "bash"])
        #expect(script.status == 0)
        let playground = try Playground()
        try playground.write("completion.bash", script.stdout)
        func complete(_ words: [String]) throws -> [String] {
            let quoted = words.map { "'\($0)'" }.joined(separator: " ")
            let run = Child()
            run.executableURL = URL(fileURLWithPath: "/bin/bash")
            run.arguments = ["-c", "source '\(playground.url("completion.bash").path)'; COMP_WORDS=(\(quoted)); COMP_CWORD=\(words.count - 1); _basket_sync; printf '%s\\n' \"${COMPREPLY[@]}\""]
            let output = Pipe()
            run.standardOutput = output
            try run.run()
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            run.waitUntilExit()
            return text.split(separator: "\n").map(String.init).sorted()
        }
        #expect(try complete(["basket-sync", ""]).filter { !$0.hasPrefix("-") } == commands.sorted())
        #expect(try complete(["basket-sync", "wa"]) == ["wait", "watch"])
        #expect(try complete(["basket-sync", "-C", "/tmp", "watch", "--p"]) == ["--poll"])
        #expect(try complete(["basket-sync", "push", "--"]).contains("--transfer"))
        #expect(try complete(["basket-sync", "init", "--t"]) == ["--tree"])
        // A directory with a space is one candidate; the values
        // of --log-format, --mode and completion are offered.
        try FileManager.default.createDirectory(atPath: playground.path + "/with space", withIntermediateDirectories: true)
        #expect(try complete(["basket-sync", "-C", playground.path + "/with"]) == [playground.path + "/with space"])
        #expect(try complete(["basket-sync", "watch", "--log-format", ""]) == ["human", "json"])
        #expect(try complete(["basket-sync", "set-store", "s", "--mode", ""]) == ["retailer", "standalone"])
        #expect(try complete(["basket-sync", "completion", ""]) == ["bash"])
    }

    @Test func completionAndManAreRefusedWithAWrongArgument() throws {
        let zsh = try basketSync(["completion", "zsh"])
        #expect(zsh.status == 64 && zsh.stderr.contains("completion bash"), "\(zsh.stderr)")
        #expect(try basketSync(["man", "--x"]).status == 64)
    }
}
