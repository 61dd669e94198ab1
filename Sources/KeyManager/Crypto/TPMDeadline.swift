import Foundation
import Glibc

/// W10: every TPM operation (`TPMConnection.with`, and so every command in it) has a deadline. libtss2's socket
/// TCTIs wait for an answer without one (ESYS's synchronous calls pass "block forever", and swtpm's TCTI reads with
/// none), so a TPM that accepts the connection but never answers would hang every write and every TPM signature.
///
/// At the deadline a watchdog shuts down this process's sockets connected to the TCTI's endpoint (its Unix socket and
/// control socket, or its TCP ports): the read libtss2 is blocked in returns, the command fails, and the operation
/// ends as `unreachable`, 69 naming the TCTI. Nothing is left half-written: a TPM command inside a write transaction
/// (the rollback counter's check) fails the transaction; the counter's step after a commit leaves the store one step
/// ahead, which the next write accepts and repairs. A kernel device (`device:/dev/tpmrm0`) has no socket to shut
/// down: its driver's own command timeouts bound it.
///
/// The watchdog is a thread of its own for the operation (no Dispatch: keymgr's agent forks, and libdispatch's pool
/// does not survive a fork), ended as soon as the operation is.
final class TPMDeadline: @unchecked Sendable {
    private enum State { case running, finished, fired }

    /// Seconds an operation may take: `KEYMGR_TPM_TIMEOUT` (1 to 600), else 30.
    static let seconds: Int = {
        guard let text = getenv("KEYMGR_TPM_TIMEOUT").map({ String(cString: $0) }), let value = Int(text),
              (1...600).contains(value) else { return 30 }
        return value
    }()

    /// Guards `state`, and wakes the watchdog when the operation ends.
    private let condition = NSCondition()
    private var state = State.running
    private let tcti: String

    private init(tcti: String) {
        self.tcti = tcti
    }

    /// Starts the watchdog for one operation on `tcti`.
    static func start(tcti: String) -> TPMDeadline {
        let deadline = TPMDeadline(tcti: tcti)
        let limit = Date().addingTimeInterval(TimeInterval(seconds))
        Thread { deadline.watch(until: limit) }.start()
        return deadline
    }

    private func watch(until limit: Date) {
        condition.lock()
        defer { condition.unlock() }
        while state == .running {
            if !condition.wait(until: limit), state == .running {
                state = .fired
                Self.shutDownSockets(reaching: tcti)
            }
        }
    }

    /// Ends the watchdog; true when the deadline had passed and the operation's connection was cut.
    func finish() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        if state == .fired { return true }
        state = .finished
        condition.signal()
        return false
    }

    /// The failure an operation cut at its deadline ends with.
    var failure: TPMFailure {
        .unreachable(tcti: tcti, detail: "it accepted the connection but did not answer within \(Self.seconds) s "
            + "(KEYMGR_TPM_TIMEOUT)")
    }

    /// The Unix socket paths and TCP ports a TCTI's commands go to: `path=` and its `.ctrl`, or `port=` (default
    /// 2321) and the control port after it. None for a device.
    static func endpoints(of tcti: String) -> (paths: Set<String>, ports: Set<UInt16>) {
        let split = tcti.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        let name = String(split.first ?? "")
        guard name.contains("swtpm") || name.contains("mssim") else { return ([], []) }
        var paths: Set<String> = []
        var port: UInt16 = 2321
        for option in (split.count > 1 ? split[1] : "").split(separator: ",") {
            if option.hasPrefix("path=") {
                let path = String(option.dropFirst("path=".count))
                paths = [path, path + ".ctrl"]
            } else if option.hasPrefix("port="), let value = UInt16(option.dropFirst("port=".count)) {
                port = value
            }
        }
        if !paths.isEmpty { return (paths, []) }
        return ([], [port, port &+ 1])
    }

    /// Shuts down (both ways) every socket of this process whose peer is one of the TCTI's endpoints.
    static func shutDownSockets(reaching tcti: String) {
        let (paths, ports) = endpoints(of: tcti)
        guard !paths.isEmpty || !ports.isEmpty, let directory = opendir("/proc/self/fd") else { return }
        defer { closedir(directory) }
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let descriptor = Int32(name) else { continue }
            var info = stat()
            guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFSOCK else { continue }
            var address = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let named = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(descriptor, $0, &length) }
            }
            guard named == 0 else { continue }
            var reaches = false
            switch Int32(address.ss_family) {
            case AF_UNIX:
                let path = withUnsafeBytes(of: &address) { raw -> String in
                    let offset = MemoryLayout<sa_family_t>.size
                    let bytes = raw[offset..<min(raw.count, Int(length))]
                    return String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
                }
                reaches = paths.contains(path)
            case AF_INET:
                let port = withUnsafeBytes(of: &address) { $0.load(fromByteOffset: 2, as: UInt16.self) }
                reaches = ports.contains(UInt16(bigEndian: port))
            case AF_INET6:
                let port = withUnsafeBytes(of: &address) { $0.load(fromByteOffset: 2, as: UInt16.self) }
                reaches = ports.contains(UInt16(bigEndian: port))
            default:
                break
            }
            if reaches { _ = shutdown(descriptor, Int32(SHUT_RDWR)) }
        }
    }
}
