import Foundation
import Testing

/// docs/spec.md §12: under systemd (`Type=notify`, `WatchdogSec=`), the agent says READY once its
/// start pass is over and pings the watchdog with its heartbeat — spoken to a real datagram
/// socket in `NOTIFY_SOCKET`, a path or an abstract name.
@Suite struct NotifyTests {
    @Test(arguments: ["path", "abstract"])
    func theAgentSaysReadyThenPingsTheWatchdog(kind: String) async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let socket = kind == "path" ? playground.path + "/notify.sock" : "@basket-sync-test-\(UUID().uuidString.prefix(12))"
        let received = playground.path + "/received"
        // The listener: every datagram appended to `received`, one per line.
        let listener = Child()
        listener.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        listener.arguments = ["python3", "-c", """
            import socket, sys
            address = sys.argv[1]
            server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            server.bind("\\0" + address[1:] if address.startswith("@") else address)
            open(sys.argv[2] + ".ready", "w").close()
            while True:
                data = server.recv(4096).decode()
                with open(sys.argv[2], "a") as f:
                    f.write(data.replace("\\n", " | ") + "\\n")
            """, socket, received]
        try listener.run()
        defer { kill(listener.processIdentifier, SIGKILL) }
        try await eventually("the listener is bound") { FileManager.default.fileExists(atPath: received + ".ready") }
        let agent = try AgentProcess(directory: playground.path, environment: ["NOTIFY_SOCKET": socket, "WATCHDOG_USEC": "400000"])
        try await agent.waitUntilWatching()
        try await eventually("READY, then watchdog pings") {
            let lines = playground.read("received").split(separator: "\n")
            return lines.first?.hasPrefix("READY=1 | STATUS=watching ") == true && lines.filter { $0 == "WATCHDOG=1" }.count >= 3
        }
        // The pings come with the heartbeat, at half the watchdog's interval: the heartbeat note says so.
        let health = try JSONSerialization.jsonObject(with: Data(try basketSync(["-C", playground.path, "status", "--json"]).stdout.utf8)) as? [String: Any]
        #expect((health?["health"] as? [String: Any])?["heartbeatSeconds"] as? Double == 0.2, "\(String(describing: health?["health"]))")
        #expect(agent.stop() == 0)
        try await eventually("STOPPING said") { playground.read("received").split(separator: "\n").last == "STOPPING=1" }
    }
}
