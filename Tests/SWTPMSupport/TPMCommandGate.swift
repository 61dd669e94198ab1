import Foundation

/// A relay in front of a `SoftwareTPM` (Tests/tools/tpm_gate.py): keymgr pinned to `tcti` sends every TPM command
/// through it, so a test can see the commands each process sent, and SIGKILL the process that sends a given command
/// before the TPM sees it (a crash at an exact point, not after a guessed delay).
public final class TPMCommandGate: @unchecked Sendable {
    /// TPM 2.0 command codes (TPM 2.0 Part 2, TPM_CC).
    public enum Command: UInt32, Sendable {
        case nvIncrement = 0x134
        case nvRead = 0x14E
        case load = 0x157
        case sign = 0x15D
        case flushContext = 0x165
    }

    /// The relay's socket; the control socket is `<socket>.ctrl`.
    public let socket: String
    private let directory: URL
    private let log: URL
    private let arm: URL
    private var process: Process?

    /// `swtpm:path=<socket>` of the relay.
    public var tcti: String { "swtpm:path=\(socket)" }

    public init(in front: SoftwareTPM) throws {
        directory = front.directory.appendingPathComponent("gate", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        socket = directory.appendingPathComponent("tpm.sock").path
        log = directory.appendingPathComponent("commands.log")
        arm = directory.appendingPathComponent("arm")
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("tools/tpm_gate.py")
        let relay = Process()
        relay.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
        relay.arguments = ["600", "/usr/bin/python3", script.path, socket, front.socket, log.path, arm.path]
        relay.standardOutput = FileHandle.nullDevice
        relay.standardError = FileHandle.nullDevice
        try relay.run()
        process = relay
        let deadline = Date().addingTimeInterval(10)
        while !(FileManager.default.fileExists(atPath: socket) && FileManager.default.fileExists(atPath: socket + ".ctrl")) {
            guard relay.isRunning, Date() < deadline else {
                stop()
                throw SoftwareTPMError("the TPM relay did not start at \(socket)")
            }
            usleep(5_000)
        }
    }

    deinit { stop() }

    public func stop() {
        guard let relay = process else { return }
        process = nil
        if relay.isRunning { relay.terminate() }
        relay.waitUntilExit()
    }

    /// SIGKILLs the process that sends the next `command`, before the TPM sees it.
    public func killSender(ofNext command: Command) throws {
        try String(format: "0x%x\n", command.rawValue).write(to: arm, atomically: true, encoding: .utf8)
    }

    /// Swallows the next `command` and never answers it (a TPM that accepts the connection and then says nothing),
    /// until the sender hangs up. The log says "stalled 0x<code>".
    public func stall(next command: Command) throws {
        try String(format: "stall 0x%x\n", command.rawValue).write(to: arm, atomically: true, encoding: .utf8)
    }

    /// Whether a kill armed with `killSender` (or a stall) is still waiting for its command.
    public var armed: Bool { FileManager.default.fileExists(atPath: arm.path) }

    /// The commands sent since the last `forget()`, in order, as "0x<code>" ("killed 0x<code>" for one that never
    /// reached the TPM), each with the sender's pid.
    public func commands() throws -> [(code: String, pid: Int32)] {
        guard let text = try? String(contentsOf: log, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").map { line in
            let fields = line.split(separator: " ")
            return (fields.dropLast().joined(separator: " "), Int32(fields.last ?? "") ?? 0)
        }
    }

    /// Forgets the commands logged so far.
    public func forget() {
        try? FileManager.default.removeItem(at: log)
    }

    /// The log's text for a command code.
    public static func code(_ command: Command) -> String { String(format: "0x%x", command.rawValue) }
}
