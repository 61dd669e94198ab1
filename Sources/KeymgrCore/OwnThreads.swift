import Dispatch
import Foundation
import Synchronization

/// Threads of keymgr's own for its async work (a command's tasks, blocking libcurl transfers, waits), instead of
/// libdispatch's thread pool.
///
/// Why: on Linux, the first worker libdispatch's pool registers starts its pool monitor, a timer on the manager
/// queue, whose thread is the user-interactive QoS root queue's; libdispatch gives that thread nice -4 with
/// setpriority(2). An unprivileged process may not lower its nice, so under the agent's unit (User=keymgr, no
/// capabilities) every request that went to the network logged "Failed to set thread priority for worker thread …
/// errno=13". keymgr needs no priority: a command's async work runs on one thread of its own (`Executor`), each
/// blocking transfer on a thread it starts, and the agent's workers never use libdispatch's pool.
public enum OwnThreads {
    /// Runs the blocking `work` on a new thread of its own and resumes the awaiting task with its result.
    public static func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            start { continuation.resume(with: Result { try work() }) }
        }
    }

    /// Waits `seconds` without holding a task's thread (`Task.sleep` would arm a libdispatch timer); then checks
    /// for cancellation.
    public static func sleep(seconds: TimeInterval) async throws {
        try await run { Thread.sleep(forTimeInterval: max(0, seconds)) }
        try Task.checkCancellation()
    }

    /// Starts `body` on a new detached thread (pthread_create, through Foundation's `Thread`).
    public static func start(_ body: @escaping @Sendable () -> Void) {
        Thread(block: body).start()
    }

    /// A task executor with one thread of its own: a command's tasks (and their child tasks) prefer it
    /// (`Task(executorPreference:)`), so none of them runs on libdispatch's pool. Started on first use, in the
    /// process that uses it (an agent's worker, after its fork).
    public final class Executor: TaskExecutor {
        /// The process's one executor.
        public static let shared = Executor()

        private let jobs = Mutex<[UnownedJob]>([])
        /// One signal per job enqueued (a semaphore is a futex: no libdispatch thread).
        private let ready = DispatchSemaphore(value: 0)

        private init() {
            OwnThreads.start { [unowned self] in self.loop() }
        }

        public func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            jobs.withLock { $0.append(job) }
            ready.signal()
        }

        private func loop() -> Never {
            while true {
                ready.wait()
                guard let job = jobs.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) else { continue }
                job.runSynchronously(on: asUnownedTaskExecutor())
            }
        }
    }
}
