import CAgentSocket
import Foundation
import Glibc
import XCTest

/// The C shim on real Unix sockets: descriptors arrive as the same open files, close-on-exec; more than asked for
/// is an error that leaves no descriptor behind; the peer's credentials are the kernel's.
final class AgentSocketTests: XCTestCase {
    private func pair() -> (Int32, Int32) {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds), 0)
        return (fds[0], fds[1])
    }

    private func openDescriptors() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
    }

    func testDescriptorsArriveWithTheBytesAsTheSameOpenFiles() throws {
        let (a, b) = pair()
        defer { close(a); close(b) }
        var pipeEnds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&pipeEnds), 0)
        defer { close(pipeEnds[0]); close(pipeEnds[1]) }
        let message = Array("hello agent".utf8)
        let sent = [pipeEnds[1], pipeEnds[0]]
        XCTAssertEqual(agent_socket_send(a, message, message.count, sent, sent.count), 0)

        var buffer = [UInt8](repeating: 0, count: 64)
        var fds = [Int32](repeating: -1, count: 9)
        var count = 0
        let got = agent_socket_receive(b, &buffer, buffer.count, &fds, 9, &count)
        XCTAssertEqual(got, message.count)
        XCTAssertEqual(Array(buffer[0..<got]), message)
        XCTAssertEqual(count, 2)
        defer { for fd in fds[0..<count] { close(fd) } }
        XCTAssertNotEqual(fcntl(fds[0], F_GETFD) & FD_CLOEXEC, 0, "received descriptors are close-on-exec")
        // The received write end writes into the original pipe.
        XCTAssertEqual(write(fds[0], "x", 1), 1)
        var byte: UInt8 = 0
        XCTAssertEqual(read(pipeEnds[0], &byte, 1), 1)
        XCTAssertEqual(byte, UInt8(ascii: "x"))
    }

    func testMoreDescriptorsThanAskedForIsAnErrorThatClosesThemAll() throws {
        let (a, b) = pair()
        defer { close(a); close(b) }
        let before = openDescriptors()
        let sent: [Int32] = [0, 1, 2, 0, 1]
        XCTAssertEqual(agent_socket_send(a, "x", 1, sent, sent.count), 0)
        var buffer = [UInt8](repeating: 0, count: 8)
        var fds = [Int32](repeating: -1, count: 9)
        var count = 7
        XCTAssertEqual(agent_socket_receive(b, &buffer, buffer.count, &fds, 3, &count), -1)
        XCTAssertEqual(errno, EMSGSIZE)
        XCTAssertEqual(count, 0)
        XCTAssertEqual(openDescriptors(), before, "no received descriptor is left open")

        // Descriptors to a reader that accepts none: also an error, also closed.
        XCTAssertEqual(agent_socket_send(a, "y", 1, sent, 1), 0)
        XCTAssertEqual(agent_socket_receive(b, &buffer, buffer.count, nil, 0, &count), -1)
        XCTAssertEqual(errno, EMSGSIZE)
        XCTAssertEqual(openDescriptors(), before)
    }

    func testTooManyDescriptorsAreNotSent() {
        let (a, b) = pair()
        defer { close(a); close(b) }
        // One more than AGENT_SOCKET_MAX_FDS: 8 numbered descriptors, the terminal and 4 named files.
        let fourteen = [Int32](repeating: 1, count: Int(AGENT_SOCKET_MAX_FDS) + 1)
        XCTAssertEqual(AGENT_SOCKET_MAX_FDS, 13)
        XCTAssertEqual(agent_socket_send(a, "x", 1, fourteen, fourteen.count), -1)
        XCTAssertEqual(errno, EINVAL)
    }

    func testAShortReceiveLeavesTheRestForTheNext() throws {
        let (a, b) = pair()
        defer { close(a); close(b) }
        let message = Array("0123456789".utf8)
        XCTAssertEqual(agent_socket_send(a, message, message.count, [1], 1), 0)
        var buffer = [UInt8](repeating: 0, count: 4)
        var fds = [Int32](repeating: -1, count: 9)
        var count = 0
        XCTAssertEqual(agent_socket_receive(b, &buffer, 4, &fds, 9, &count), 4)
        XCTAssertEqual(count, 1)
        close(fds[0])
        var rest = [UInt8](repeating: 0, count: 16)
        XCTAssertEqual(agent_socket_receive(b, &rest, rest.count, &fds, 9, &count), 6)
        XCTAssertEqual(count, 0)
        XCTAssertEqual(Array(rest[0..<6]), Array("456789".utf8))
    }

    func testPeerCredentialsAndGroupsAreTheKernels() throws {
        let (a, b) = pair()
        defer { close(a); close(b) }
        var uid: UInt32 = 99, gid: UInt32 = 99
        var pid: Int32 = 0
        XCTAssertEqual(agent_socket_peer_credentials(b, &uid, &gid, &pid), 0)
        XCTAssertEqual(uid, getuid())
        XCTAssertEqual(gid, getgid())
        XCTAssertEqual(pid, getpid())

        var groups: UnsafeMutablePointer<UInt32>?
        var count = 0
        XCTAssertEqual(agent_socket_peer_groups(b, &groups, &count), 0)
        defer { free(groups) }
        let mine = Int(getgroups(0, nil))
        var expected = [gid_t](repeating: 0, count: mine)
        _ = getgroups(Int32(mine), &expected)
        let received = groups.map { Array(UnsafeBufferPointer(start: $0, count: count)) } ?? []
        XCTAssertEqual(Set(received), Set(expected))
    }

    func testConnectAndListenOnAPath() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("agent-socket-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("s.sock").path
        XCTAssertEqual(agent_socket_connect(path), -1)
        XCTAssertEqual(errno, ENOENT)
        let listener = agent_socket_listen(path, 4)
        XCTAssertGreaterThanOrEqual(listener, 0)
        defer { close(listener) }
        let client = agent_socket_connect(path)
        XCTAssertGreaterThanOrEqual(client, 0)
        close(client)
        XCTAssertEqual(agent_socket_connect("/" + String(repeating: "x", count: 200)), -1)
        XCTAssertEqual(errno, ENAMETOOLONG)
    }
}
