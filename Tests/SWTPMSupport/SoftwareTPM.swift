import Foundation

/// A swtpm (a software TPM 2.0) of a test's own: its state in a temporary directory, reached on a Unix socket there,
/// run under `timeout` so that a test that dies never leaves it behind. Nothing here skips: a missing swtpm fails
/// the test (`make deps` installs it).
public final class SoftwareTPM: @unchecked Sendable {
    /// The directory holding the TPM's state and its sockets.
    public let directory: URL
    /// The socket keymgr talks to; the control socket is `<socket>.ctrl`.
    public let socket: String
    private var process: Process?

    /// `swtpm:path=<socket>`: the TCTI keymgr pins.
    public var tcti: String { "swtpm:path=\(socket)" }

    /// Starts a fresh TPM (its state in a new directory). `socket` places the socket elsewhere (e.g. where another
    /// TPM's socket was, to stand in for it).
    public init(socket: String? = nil) throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("keymgr-swtpm-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        self.socket = socket ?? directory.appendingPathComponent("tpm.sock").path
        try start()
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Starts swtpm on the state it has (a restart keeps persistent objects, NV indices and the DA counter).
    public func start() throws {
        guard process == nil else { return }
        try? FileManager.default.removeItem(atPath: socket)
        let swtpm = Process()
        swtpm.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
        swtpm.arguments = ["600", "swtpm", "socket", "--tpm2", "--tpmstate", "dir=\(directory.path)",
                           "--server", "type=unixio,path=\(socket)", "--ctrl", "type=unixio,path=\(socket).ctrl",
                           "--flags", "not-need-init,startup-clear"]
        swtpm.standardOutput = FileHandle.nullDevice
        swtpm.standardError = FileHandle.nullDevice
        try swtpm.run()
        process = swtpm
        let deadline = Date().addingTimeInterval(10)
        while !FileManager.default.fileExists(atPath: socket) {
            guard swtpm.isRunning, Date() < deadline else {
                stop()
                throw SoftwareTPMError("swtpm did not start at \(socket) (is it installed? `make deps`)")
            }
            usleep(5_000)
        }
    }

    /// Stops swtpm (SIGTERM through `timeout`), keeping its state for `start()`.
    public func stop() {
        guard let swtpm = process else { return }
        process = nil
        if swtpm.isRunning { swtpm.terminate() }
        swtpm.waitUntilExit()
        try? FileManager.default.removeItem(atPath: socket)
        try? FileManager.default.removeItem(atPath: socket + ".ctrl")
    }
}

public struct SoftwareTPMError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
