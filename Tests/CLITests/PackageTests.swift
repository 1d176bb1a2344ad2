import Foundation
import Testing

/// The Debian package `scripts/package` makes: its control and contents, a binary that
/// needs only Debian's libraries, and — where allowed (`BASKET_SYNC_PACKAGE_INSTALL=1`, as
/// `.ci/run` sets on its throwaway machine) — installed with dpkg, run with the Swift toolchain
/// hidden, removed and purged.
@Suite(.serialized) struct PackageTests {
    /// Runs a program; its status and output (stdout and stderr together).
    @discardableResult
    func run(_ program: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let child = Child()
        child.executableURL = URL(fileURLWithPath: program)
        child.arguments = arguments
        let output = Pipe()
        child.standardOutput = output
        child.standardError = output
        try child.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        child.waitUntilExit()
        return (child.terminationStatus, text)
    }

    @Test func thePackageHoldsAStaticBinaryInstallsRunsWithoutSwiftAndRemovesCleanly() throws {
        let root = binary.path.components(separatedBy: "/.build/").first ?? ""
        let dist = root + "/dist"
        guard let name = (try? FileManager.default.contentsOfDirectory(atPath: dist))?.first(where: { $0.hasPrefix("basket-sync_") && $0.hasSuffix(".deb") }) else {
            print("PackageTests skipped: no dist/basket-sync_*.deb (scripts/package makes it; .ci/run does)")
            return
        }
        let deb = dist + "/" + name
        let info = try run("/usr/bin/dpkg-deb", ["--info", deb]).output
        #expect(info.contains("Package: basket-sync") && info.contains("libinotifytools0") && info.contains("libsqlite3-0"), "\(info)")
        // Versioned as dpkg-shlibdeps reads the binary: an older glibc refuses the install, not the run.
        #expect(info.contains("libc6 (>= 2.") && info.contains("libstdc++6 (>= "), "\(info)")
        #expect(info.contains(" md5sums") && info.contains(" prerm"), "\(info)")
        let contents = try run("/usr/bin/dpkg-deb", ["--contents", deb]).output
        for path in ["./usr/bin/basket-sync", "./usr/share/man/man1/basket-sync.1.gz", "./usr/share/bash-completion/completions/basket-sync",
                     "./lib/systemd/system/basket-sync@.service", "./lib/systemd/system/basket-sync-tree.service", "./usr/share/doc/basket-sync/samples/"] {
            #expect(contents.contains(path), "\(path) is not in the package")
        }
        #expect(!contents.contains("./lib/systemd/system/basket-sync-host@"), "the host's unit is a sample to adapt, not an installed unit")
        #expect(contents.hasPrefix("drwxr-xr-x root/root"), "the package's ./ entry is 0755: \(contents.prefix(60))")
        // Debian's own checker finds nothing to say (lintian as root warns that it runs as root).
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/lintian") {
            let lint = try run("/usr/bin/lintian", [deb]).output.split(separator: "\n").filter { $0.hasPrefix("E:") || $0.hasPrefix("W:") }
            #expect(lint.isEmpty, "lintian: \(lint.joined(separator: "\n"))")
        } else {
            print("PackageTests: lintian is not installed (apt-get install lintian): not run")
        }
        // The packaged binary needs Debian's libraries only: no Swift runtime.
        let playground = try Playground()
        #expect(try run("/usr/bin/dpkg-deb", ["-x", deb, playground.path]).status == 0)
        let packaged = playground.path + "/usr/bin/basket-sync"
        let libraries = try run("/usr/bin/ldd", [packaged]).output
        #expect(!libraries.contains("swift") && !libraries.contains("not found"), "\(libraries)")
        #expect(try run(packaged, ["--version"]).output.hasPrefix("basket-sync "))
        // The static runtime would run a ./swift-backtrace of the current directory on a crash
        // when started by name from the PATH (as an operator does). The agent, crashed by SIGSEGV
        // in a directory that holds one, never runs it.
        let trap = playground.path + "/trap"
        try FileManager.default.createDirectory(atPath: trap, withIntermediateDirectories: true)
        try "#!/bin/sh\ntouch \(trap)/ran\n".write(toFile: trap + "/swift-backtrace", atomically: false, encoding: .utf8)
        #expect(chmod(trap + "/swift-backtrace", 0o755) == 0)
        let crash = """
            PATH=\(playground.path)/usr/bin:$PATH; cd \(trap) && basket-sync -C sync init >/dev/null && { basket-sync -C sync watch 2>log & pid=$!; }
            for i in $(seq 400); do grep -q watching log && break; sleep 0.05; done
            kill -SEGV $pid
            for i in $(seq 400); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
            kill -KILL $pid 2>/dev/null; wait $pid; echo "exit $?"
            """
        let crashed = try run("/bin/sh", ["-c", crash])
        #expect(crashed.output.contains("exit 139"), "the agent died of its SIGSEGV at once (137: it hung, waiting for a crash helper): \(crashed.output)")
        #expect(!FileManager.default.fileExists(atPath: trap + "/ran"), "./swift-backtrace was run")

        guard ProcessInfo.processInfo.environment["BASKET_SYNC_PACKAGE_INSTALL"] == "1", getuid() == 0 else {
            print("PackageTests: not installed (set BASKET_SYNC_PACKAGE_INSTALL=1 as root on a throwaway machine, as .ci/run does)")
            return
        }
        let installed = try run("/usr/bin/dpkg", ["-i", deb])
        #expect(installed.status == 0, "\(installed.output)")
        #expect(try run("/usr/bin/getent", ["passwd", "basket-sync"]).status == 0, "the postinst makes the user")
        #expect(FileManager.default.fileExists(atPath: "/srv/basket-sync") && FileManager.default.fileExists(atPath: "/srv/basket-sync-tree"))
        // The toolchain that built the tests, hidden under an empty directory in a mount namespace.
        let swiftRuntime = try run("/usr/bin/ldd", [binary.path]).output.split(separator: "\n").first { $0.contains("libswiftCore") }
        let toolchain = swiftRuntime.flatMap { $0.split(separator: " ").dropFirst(2).first }.map { String($0).components(separatedBy: "/usr/lib/swift").first ?? "" } ?? ""
        if !toolchain.isEmpty {
            let empty = playground.path + "/empty"
            try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
            let sandbox = playground.path + "/sandbox"
            let script = "mount --bind \(empty) \(toolchain) && ! ls \(toolchain)/usr >/dev/null 2>&1 && basket-sync -C \(sandbox) init && basket-sync -C \(sandbox) push A=+1 && basket-sync -C \(sandbox) sync && basket-sync -C \(sandbox) status"
            let hidden = try run("/usr/bin/unshare", ["-m", "/bin/sh", "-c", script])
            #expect(hidden.status == 0 && hidden.output.contains("last seq: outbox #1,"), "with \(toolchain) hidden: \(hidden.output)")
        } else {
            print("PackageTests: the tests' binary loads no libswiftCore (a static build): nothing to hide")
        }
        #expect(try run("/usr/bin/dpkg", ["-r", "basket-sync"]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: "/usr/bin/basket-sync"), "remove takes the binary")
        #expect(FileManager.default.fileExists(atPath: "/srv/basket-sync"), "remove keeps the data")
        // An instance enabled before (the link systemctl enable makes): purge removes it.
        let wants = "/etc/systemd/system/multi-user.target.wants"
        try FileManager.default.createDirectory(atPath: wants, withIntermediateDirectories: true)
        try? FileManager.default.removeItem(atPath: wants + "/basket-sync@shop1.service")
        try FileManager.default.createSymbolicLink(atPath: wants + "/basket-sync@shop1.service", withDestinationPath: "/lib/systemd/system/basket-sync@.service")
        #expect(try run("/usr/bin/dpkg", ["-P", "basket-sync"]).status == 0)
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: wants + "/basket-sync@shop1.service")) == nil, "purge removes the enable links")
        #expect(try run("/usr/bin/getent", ["passwd", "basket-sync"]).status == 0, "purge keeps the user (the data's owner)")
        #expect(FileManager.default.fileExists(atPath: "/srv/basket-sync"), "purge keeps the data")
    }
}
