import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One accepted TCP connection's descriptor: blocking reads and writes, and the two ways it ends.
struct ConnectionSocket: Sendable {
    let descriptor: Int32

    /// The bytes that arrived next: empty when the peer closed its side, nil when the connection broke.
    func receive() -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = bytes.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count >= 0 { return Array(bytes[0..<count]) }
            if errno != EINTR { return nil }
        }
    }

    /// Sends all of `bytes`; false when the connection broke (no SIGPIPE: the peer may be gone).
    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let count = bytes.withUnsafeBytes {
                Glibc.send(descriptor, $0.baseAddress?.advanced(by: sent), $0.count - sent, Int32(MSG_NOSIGNAL))
            }
            if count < 0, errno == EINTR { continue }
            if count <= 0 { return false }
            sent += count
        }
        return true
    }

    /// Ends the connection with a TCP reset instead of an orderly close: SO_LINGER with a zero timeout, then close.
    func reset() {
        var immediately = linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(descriptor, SOL_SOCKET, SO_LINGER, &immediately, socklen_t(MemoryLayout<linger>.size))
        close(descriptor)
    }

    /// Ends the connection in order: no more sending, then what the peer still sends is read and dropped until it
    /// closes (at most a second), so that closing with unread bytes does not reset the connection and take the
    /// answer with it (RFC 9112 §9.6).
    func closeInOrder() {
        shutdown(descriptor, Int32(SHUT_WR))
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        _ = setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var drained = 0
        while drained < 4 << 20, let bytes = receive(), !bytes.isEmpty { drained += bytes.count }
        close(descriptor)
    }
}
