// hoop as a C++ c10d::Backend (torch >= 2.0), over one hoop_comm_t.
//
// Every operation is posted to hoop as a nonblocking call at once and returns a HoopWork. A
// lane (the group's collectives, which complete in posting order; the sends to, the receives from
// each peer; receives from any source) has a thread of its own that waits for hoop's requests in
// order, copies results out where the call used a temporary, and completes the Work and its
// c10::ivalue::Future: the future's callbacks run there, never on hoop's progress thread, one
// after the other in posting order. A callback may post another operation and wait for it:
// HoopWork::wait() from a lane's own thread completes the lane's next operations itself, and a
// lane whose thread stays in callbacks (a wait this file cannot see, such as the future's own
// wait()) while operations queue up behind it is taken over by a new thread.
//
// C++17: torch's headers need it. Nothing here takes the GIL.

#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hoop.h"

namespace hoop_torch
{

using Clock = std::chrono::steady_clock;

class Lane;
class State;

// One posted operation, as its lane sees it.
struct Op {
    std::vector<hoop_request_t *> reqs;
    std::function<void()> post;   // copies out of temporaries once every request succeeded
    std::vector<at::Tensor> keep; // every tensor hoop reads or writes, alive until the end
    std::string what;
    std::exception_ptr posting_error; // a failure while posting a multi-request call
    c10::intrusive_ptr<class HoopWork> work;
};

// The error torch raises for a failed collective (torch.distributed.DistBackendError, a
// RuntimeError), carrying hoop's sentence.
static std::exception_ptr backend_error(const std::string &msg)
{
    try {
        C10_THROW_ERROR(DistBackendError, msg);
    } catch (...) {
        return std::current_exception();
    }
}

// A hoop call of this group that ended with rc, as torch's error.
static std::exception_ptr call_error(hoop_comm_t *comm, const std::string &what, hoop_result_t rc)
{
    std::string msg = "hoop backend: " + what + " failed: " + hoop_error_string(rc) + ": " +
                      hoop_comm_last_error(comm);
    if (rc == HOOP_ERR_TIMEOUT)
        msg += ": the process group's timeout (init_process_group(timeout=...), or "
               "HOOP_TIMEOUT) ran out";
    return backend_error(msg);
}

class HoopWork : public c10d::Work
{
  public:
    HoopWork(int rank, c10d::OpType type, const char *title, const std::vector<at::Tensor> &inputs,
             std::vector<at::Tensor> outputs, std::shared_ptr<Lane> lane,
             std::chrono::milliseconds limit)
        : c10d::Work(rank, type, title, std::optional<std::vector<at::Tensor>>(inputs)),
          outputs_(std::move(outputs)), lane_(std::move(lane)), limit_(limit),
          future_(c10::make_intrusive<c10::ivalue::Future>(
              c10::ListType::create(c10::TensorType::get())))
    {
    }

    bool isCompleted() override
    {
        std::lock_guard<std::mutex> g(m_);
        return done_;
    }
    bool isSuccess() const override
    {
        std::lock_guard<std::mutex> g(m_);
        return done_ && !error_;
    }
    std::exception_ptr exception() const override
    {
        std::lock_guard<std::mutex> g(m_);
        return error_;
    }
    int sourceRank() const override
    {
        TORCH_CHECK(source_ >= 0, "hoop backend: sourceRank() is only known for a completed "
                                  "receive from any source");
        return source_;
    }
    std::vector<at::Tensor> result() override { return outputs_; }
    void synchronize() override {}
    bool wait(std::chrono::milliseconds timeout) override;
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
    void set_lane(std::shared_ptr<Lane> l) { lane_ = std::move(l); }

    // Called once, by whichever thread completes the operation; runs the future's callbacks.
    void complete(std::exception_ptr err);

    bool done()
    {
        std::lock_guard<std::mutex> g(m_);
        return done_;
    }

    int source_ = -1;     // hoop_irecv_any writes the sender here
    int any_source_ = -1; // written by hoop_irecv_any

  private:
    mutable std::mutex m_;
    std::condition_variable cv_;
    bool done_ = false;
    std::exception_ptr error_;
    std::vector<at::Tensor> outputs_;
    std::shared_ptr<Lane> lane_;
    std::chrono::milliseconds limit_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The lane this thread completes operations of while it runs their callbacks.
static thread_local Lane *tl_driving = nullptr;

// Operations that complete in posting order, and the thread(s) that complete them.
class Lane : public std::enable_shared_from_this<Lane>
{
  public:
    Lane(hoop_comm_t *comm, std::string name) : comm_(comm), name_(std::move(name)) {}

    void start()
    {
        std::lock_guard<std::mutex> g(m_);
        spawn_locked();
    }

    void push(std::unique_ptr<Op> op)
    {
        {
            std::lock_guard<std::mutex> g(m_);
            q_.push_back(std::move(op));
            inflight_++;
        }
        cv_.notify_all();
    }

    // Completes this lane's operations from the calling thread (one of the lane's, inside a
    // callback) until w is done.
    void drive_until(HoopWork *w)
    {
        while (!w->done()) {
            std::unique_ptr<Op> op;
            {
                std::unique_lock<std::mutex> g(m_);
                if (q_.empty()) {
                    // Another thread holds the operation w waits for: wait for it.
                    g.unlock();
                    std::this_thread::sleep_for(std::chrono::microseconds(200));
                    continue;
                }
                op = std::move(q_.front());
                q_.pop_front();
            }
            finish(std::move(op));
        }
    }

    // A thread of this lane has been in callbacks for long, with operations queued: a new
    // thread takes the queue over (the blocked one ends once its callbacks return).
    void watch(Clock::time_point now, std::chrono::milliseconds after)
    {
        std::lock_guard<std::mutex> g(m_);
        if (stopping_ || q_.empty() || busy_.empty()) return;
        for (auto &b : busy_) {
            if (b.second.active && now - b.second.since > after && !b.second.replaced) {
                b.second.replaced = true;
                spawn_locked();
                return;
            }
        }
    }

    bool pending()
    {
        std::lock_guard<std::mutex> g(m_);
        return inflight_ > 0;
    }

    void stop()
    {
        std::vector<std::thread> threads;
        {
            std::lock_guard<std::mutex> g(m_);
            stopping_ = true;
            threads.swap(threads_);
        }
        cv_.notify_all();
        for (auto &t : threads) {
            if (t.get_id() == std::this_thread::get_id())
                t.detach(); // the last reference went in one of this lane's callbacks
            else
                t.join();
        }
    }

  private:
    struct Busy {
        bool active = false;
        bool replaced = false;
        Clock::time_point since;
    };

    void spawn_locked()
    {
        auto self = shared_from_this();
        threads_.emplace_back([self] { self->run(); });
    }

    void run()
    {
        auto me = std::this_thread::get_id();
        for (;;) {
            std::unique_ptr<Op> op;
            {
                std::unique_lock<std::mutex> g(m_);
                cv_.wait(g, [&] { return stopping_ || !q_.empty() || busy_[me].replaced; });
                if (busy_[me].replaced || q_.empty()) {
                    busy_.erase(me);
                    // A thread that lost the lane goes for good (nothing joins it later): lanes
                    // whose callbacks block at every step would otherwise pile them up.
                    for (auto it = threads_.begin(); it != threads_.end(); ++it) {
                        if (it->get_id() == me) {
                            it->detach();
                            threads_.erase(it);
                            break;
                        }
                    }
                    return;
                }
                op = std::move(q_.front());
                q_.pop_front();
            }
            finish(std::move(op));
        }
    }

    void finish(std::unique_ptr<Op> op)
    {
        std::exception_ptr err = op->posting_error;
        for (auto *r : op->reqs) { // every request is waited, even after a failure, to free it
            hoop_result_t rc = hoop_wait(r);
            if (rc != HOOP_OK && !err) err = call_error(comm_, op->what, rc);
        }
        if (!err && op->post) {
            try {
                op->post();
            } catch (...) {
                err = std::current_exception();
            }
        }
        {
            std::lock_guard<std::mutex> g(m_);
            inflight_--;
        }
        auto work = std::move(op->work);
        work->source_ = work->any_source_;
        op.reset(); // the tensors go before the callbacks run, as they would after wait()
        auto me = std::this_thread::get_id();
        Lane *outer = tl_driving;
        bool nested = outer == this;
        if (!nested) {
            std::lock_guard<std::mutex> g(m_);
            auto &b = busy_[me];
            b.active = true;
            b.since = Clock::now();
        }
        tl_driving = this;
        work->complete(err);
        tl_driving = outer;
        if (!nested) {
            std::lock_guard<std::mutex> g(m_);
            busy_[me].active = false;
        }
    }

    hoop_comm_t *comm_;
    std::string name_;
    std::mutex m_;
    std::condition_variable cv_;
    std::deque<std::unique_ptr<Op>> q_;
    std::vector<std::thread> threads_;
    std::map<std::thread::id, Busy> busy_;
    bool stopping_ = false;
    size_t inflight_ = 0; // posted and not yet waited for
};

bool HoopWork::wait(std::chrono::milliseconds timeout)
{
    if (tl_driving == lane_.get())
        lane_->drive_until(this); // a callback of this lane waits for a later operation
    std::unique_lock<std::mutex> g(m_);
    // hoop ends the call itself within the group's timeout; this bound only backs it up.
    auto limit = timeout == kNoTimeout ? limit_ + std::chrono::seconds(10) : timeout;
    if (!cv_.wait_for(g, limit, [&] { return done_; }))
        C10_THROW_ERROR(DistBackendError, "hoop backend: the operation did not complete within " +
                                              std::to_string(limit.count()) + " ms");
    if (error_) std::rethrow_exception(error_);
    return true;
}

void HoopWork::complete(std::exception_ptr err)
{
    // The profiler's record of the call ends before any waiter wakes, as torch's own
    // Work::finish does: a waiter may leave the profiler's scope at once, and its record ended
    // from this thread after that raced the profiler's teardown (a crash in torch's suite).
    if (recordFunctionEndCallback_) {
        recordFunctionEndCallback_();
        recordFunctionEndCallback_ = nullptr;
    }
    {
        std::lock_guard<std::mutex> g(m_);
        done_ = true;
        error_ = err;
    }
    cv_.notify_all();
    if (err)
        future_->setError(err);
    else
        future_->markCompleted(c10::IValue(outputs_));
}

// ------------------------------------------------------------------------------ the backend

static hoop_dtype_t dtype_of(const at::Tensor &t, const char *what)
{
    switch (t.scalar_type()) {
    case at::kFloat: return HOOP_FLOAT32;
    case at::kDouble: return HOOP_FLOAT64;
    case at::kHalf: return HOOP_FLOAT16;
    case at::kBFloat16: return HOOP_BFLOAT16;
    case at::kChar: return HOOP_INT8;
    case at::kByte: return HOOP_UINT8;
    case at::kInt: return HOOP_INT32;
    case at::kLong: return HOOP_INT64;
    default: break;
    }
    TORCH_CHECK_TYPE(false, "hoop backend: ", what, " got dtype ", t.scalar_type(),
                     " (supported: float32, float64, float16, bfloat16, int8, uint8, int32, "
                     "int64)");
    return HOOP_DTYPE_COUNT;
}

static hoop_op_t op_of(const c10d::ReduceOp &op)
{
    switch (op.op_) {
    case c10d::ReduceOp::SUM: return HOOP_SUM;
    case c10d::ReduceOp::PRODUCT: return HOOP_PROD;
    case c10d::ReduceOp::MIN: return HOOP_MIN;
    case c10d::ReduceOp::MAX: return HOOP_MAX;
    case c10d::ReduceOp::AVG: return HOOP_AVG;
    default: break;
    }
    TORCH_CHECK_VALUE(false, "hoop backend: reduce op ", static_cast<int>(op.op_),
                      " is not supported (SUM, PRODUCT, MIN, MAX, AVG)");
    return HOOP_OP_COUNT;
}

// Whether elements of t may share memory, so that a result written into it cannot be kept (and
// the copy back from a temporary would only then notice, if at all): torch's test where it can
// tell, else the strides, as the Python backend has it. A layout where each dimension's stride
// steps over everything the smaller strides span cannot overlap; anything else is taken to.
static bool may_overlap(const at::Tensor &t)
{
    at::MemOverlap known = at::has_internal_overlap(t);
    if (known != at::MemOverlap::TooHard) return known == at::MemOverlap::Yes;
    std::vector<std::pair<int64_t, int64_t>> dims; // (stride, size) of the dimensions over 1
    for (int64_t d = 0; d < t.dim(); d++)
        if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
    std::sort(dims.begin(), dims.end());
    int64_t span = 1;
    for (const auto &d : dims) {
        if (d.first < span) return true;
        span += d.first * (d.second - 1);
    }
    return false;
}

// t, if hoop can serve it (out: the call writes into it); raises before any data moves
// otherwise. The checks look at this rank's tensor only; what the ranks must agree on (counts,
// dtypes) hoop compares before data moves.
static const at::Tensor &check(const at::Tensor &t, const char *what, bool out = false,
                               bool any_dtype = false)
{
    TORCH_CHECK_VALUE(t.defined(), "hoop backend: ", what, " got an undefined tensor");
    TORCH_CHECK_VALUE(t.device().is_cpu(), "hoop backend: ", what, " got a ", t.device().type(),
                      " tensor; the C++ backend takes CPU tensors only (HOOP_TORCH_BACKEND="
                      "python selects the Python one, which serves CUDA tensors)");
    TORCH_CHECK_VALUE(t.layout() == at::kStrided, "hoop backend: ", what, " got a ", t.layout(),
                      " tensor; only dense tensors are supported");
    if (!any_dtype) dtype_of(t, what);
    if (out)
        TORCH_CHECK_VALUE(!may_overlap(t), "hoop backend: ", what,
                          " would write its result into a tensor whose elements share memory "
                          "(an expand()ed view, or strides that overlap: shape ",
                          t.sizes(), ", strides ", t.strides(),
                          "); give it a tensor of its own, e.g. a clone()");
    return t;
}

static const at::Tensor &one(std::vector<at::Tensor> &ts, const char *what, bool out = false)
{
    TORCH_CHECK_VALUE(ts.size() == 1, "hoop backend: ", what, " takes one tensor per process, got ",
                      ts.size());
    return check(ts[0], what, out);
}

static void same_shapes(const std::vector<at::Tensor> &ts, const at::Tensor &ref, size_t n,
                        const char *what, bool out = false)
{
    TORCH_CHECK_VALUE(ts.size() == n, "hoop backend: ", what, " needs ", n,
                      " tensors (one per rank), got ", ts.size());
    for (const auto &t : ts) {
        check(t, what, out);
        TORCH_CHECK_VALUE(t.scalar_type() == ref.scalar_type() && t.numel() == ref.numel(),
                          "hoop backend: ", what, " tensors differ in dtype or size (",
                          t.scalar_type(), " x ", t.numel(), " against ", ref.scalar_type(), " x ",
                          ref.numel(), ")");
    }
}

// One contiguous 1-D tensor holding ts one after another (a copy).
static at::Tensor flat(const std::vector<at::Tensor> &ts)
{
    std::vector<at::Tensor> parts;
    parts.reserve(ts.size());
    for (const auto &t : ts) parts.push_back(t.reshape({-1}));
    return at::cat(parts);
}

static void copy_out(const at::Tensor &f, const std::vector<at::Tensor> &outs)
{
    int64_t off = 0;
    for (const auto &t : outs) {
        int64_t n = t.numel();
        t.copy_(f.narrow(0, off, n).view(t.sizes()));
        off += n;
    }
}

class HoopBackend : public c10d::Backend
{
  public:
    HoopBackend(const std::string &method, int rank, int size, double timeout_s)
        : c10d::Backend(rank, size)
    {
        hoop_comm_t *comm = nullptr;
        hoop_result_t rc = hoop_init(&comm, method.c_str(), rank, size);
        TORCH_CHECK(rc == HOOP_OK, "hoop backend: joining the group at ", method,
                    " failed: ", hoop_error_string(rc));
        comm_ = comm;
        if (timeout_s > 0) hoop_comm_set_timeout(comm_, timeout_s);
        limit_ = std::chrono::milliseconds(
            static_cast<int64_t>((timeout_s > 0 ? timeout_s : 300.0) * 1000));
        coll_ = lane_locked("collectives");
        watchdog_ = std::thread([this] { watch(); });
    }

    ~HoopBackend() override
    {
        // The lanes' threads may need the GIL to finish a callback written in Python.
        if (Py_IsInitialized() && PyGILState_Check()) {
            pybind11::gil_scoped_release nogil;
            shutdown();
        } else {
            shutdown();
        }
    }

    const std::string getBackendName() const override { return "hoop"; }

    // Ends the group: calls still pending fail (their peers learn why) rather than hold it for
    // the timeout.
    void shutdown()
    {
        std::vector<std::shared_ptr<Lane>> lanes;
        {
            std::lock_guard<std::mutex> g(post_m_);
            if (comm_ == nullptr) return;
            for (auto &l : lanes_) lanes.push_back(l.second);
            stopping_ = true;
        }
        watch_cv_.notify_all();
        if (watchdog_.joinable()) watchdog_.join();
        bool pending = false;
        for (auto &l : lanes) pending = pending || l->pending();
        if (pending) hoop_comm_abort(comm_);
        for (auto &l : lanes) l->stop();
        std::lock_guard<std::mutex> g(post_m_);
        hoop_comm_destroy(comm_);
        comm_ = nullptr;
    }

    hoop_comm_t *comm() const { return comm_; }

    // The collectives posted so far: the same on every rank of a group that calls the same
    // collectives, so every rank starts at 0 (torch's DETAIL wrapper compares them).
    void setSequenceNumberForGroup() override { seq_ = 0; }
    uint64_t getSequenceNumberForGroup() override { return seq_; }

    // ---- collectives

    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                             const c10d::AllreduceOptions &opts) override
    {
        for (const auto &t : tensors)
            if (t.defined() && t.is_sparse()) return sparse_allreduce(tensors, opts.reduceOp);
        for (const auto &t : tensors) check(t, "allreduce", true);
        hoop_op_t op = op_of(opts.reduceOp);
        return reduce_each("allreduce", c10d::OpType::ALLREDUCE, "hoop:all_reduce", tensors, op);
    }

    // torch's dispatcher sends a sparse CPU tensor to allreduce; allreduce_sparse is there for
    // whoever calls it by name.
    c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor> &tensors,
                                                    const c10d::AllreduceOptions &opts) override
    {
        return allreduce(tensors, opts);
    }

    c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
        std::vector<at::Tensor> &tensors, const c10d::AllreduceCoalescedOptions &opts) override
    {
        for (const auto &t : tensors) check(t, "allreduce_coalesced", true);
        hoop_op_t op = op_of(opts.reduceOp);
        return reduce_each("allreduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED,
                           "hoop:all_reduce_coalesced", tensors, op);
    }

    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                             const c10d::BroadcastOptions &opts) override
    {
        const at::Tensor &t = one(tensors, "broadcast", true);
        int root = static_cast<int>(opts.rootRank + opts.rootTensor);
        check_root(root, "broadcast");
        Call c(this, "broadcast", c10d::OpType::BROADCAST, "hoop:broadcast", tensors, tensors);
        at::Tensor b = c.inout(t);
        c.post([&](hoop_request_t **r) {
            return hoop_ibroadcast(comm_, b.data_ptr(), b.numel(), dtype_of(b, ""), root, r);
        });
        return c.submit(coll_);
    }

    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                          const c10d::ReduceOptions &opts) override
    {
        const at::Tensor &t = one(tensors, "reduce", true);
        int root = static_cast<int>(opts.rootRank + opts.rootTensor);
        check_root(root, "reduce");
        hoop_op_t op = op_of(opts.reduceOp);
        Call c(this, "reduce", c10d::OpType::REDUCE, "hoop:reduce", tensors, tensors);
        at::Tensor b = c.inout(t);
        c.post([&](hoop_request_t **r) {
            return hoop_ireduce(comm_, b.data_ptr(), b.data_ptr(), b.numel(), dtype_of(b, ""), op,
                                root, r);
        });
        return c.submit(coll_);
    }

    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                             std::vector<at::Tensor> &inputs,
                                             const c10d::AllgatherOptions &) override
    {
        const at::Tensor &in = one(inputs, "allgather");
        TORCH_CHECK_VALUE(outputs.size() == 1,
                          "hoop backend: allgather takes one output list "
                          "per process, got ",
                          outputs.size());
        same_shapes(outputs[0], in, size_, "allgather", true);
        Call c(this, "allgather", c10d::OpType::ALLGATHER, "hoop:all_gather", inputs, outputs[0]);
        at::Tensor src = c.in(in);
        at::Tensor f = c.temp(in.numel() * size_, in);
        std::vector<at::Tensor> outs = outputs[0];
        c.post([&](hoop_request_t **r) {
            return hoop_iallgather(comm_, src.data_ptr(), f.data_ptr(), src.numel(),
                                   dtype_of(src, ""), r);
        });
        c.then([f, outs] { copy_out(f, outs); });
        return c.submit(coll_);
    }

    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                   const c10d::AllgatherOptions &) override
    {
        check(input, "_allgather_base");
        check(output, "_allgather_base", true);
        pair_sizes(output, input, static_cast<int64_t>(size_), "_allgather_base", false);
        std::vector<at::Tensor> ins{input}, outs{output};
        Call c(this, "_allgather_base", c10d::OpType::_ALLGATHER_BASE, "hoop:_all_gather_base", ins,
               outs);
        post_allgather(c, output, input);
        return c.submit(coll_);
    }

    c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
        std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
        const c10d::AllgatherOptions &) override
    {
        const char *what = "allgather_into_tensor_coalesced";
        TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "hoop backend: ", what, " got ",
                          outputs.size(), " outputs for ", inputs.size(), " inputs");
        for (size_t i = 0; i < inputs.size(); i++) { // every pair before the first is posted
            check(inputs[i], what);
            check(outputs[i], what, true);
            pair_sizes(outputs[i], inputs[i], static_cast<int64_t>(size_), what, false);
        }
        Call c(this, what, c10d::OpType::COALESCED, "hoop:all_gather_into_tensor_coalesced", inputs,
               outputs);
        for (size_t i = 0; i < inputs.size(); i++) post_allgather(c, outputs[i], inputs[i]);
        return c.submit(coll_);
    }

    // Moved as bytes (no reduction), so any dtype goes, complex included: every input one after
    // another, gathered once, then copied into each rank's list.
    c10::intrusive_ptr<c10d::Work> allgather_coalesced(
        std::vector<std::vector<at::Tensor>> &outputs, std::vector<at::Tensor> &inputs,
        const c10d::AllgatherOptions &) override
    {
        const char *what = "allgather_coalesced";
        TORCH_CHECK_VALUE(outputs.size() == static_cast<size_t>(size_), "hoop backend: ", what,
                          " needs ", size_, " output lists (one per rank), got ", outputs.size());
        std::vector<int64_t> offs;
        int64_t nbytes = 0;
        for (const auto &t : inputs) {
            check(t, what, false, true);
            offs.push_back(nbytes);
            nbytes += t.numel() * static_cast<int64_t>(t.element_size());
        }
        std::vector<at::Tensor> outs;
        for (const auto &l : outputs) {
            TORCH_CHECK_VALUE(l.size() == inputs.size(), "hoop backend: ", what, " needs ",
                              inputs.size(), " outputs per rank, got ", l.size());
            for (size_t j = 0; j < l.size(); j++) {
                check(l[j], what, true, true);
                TORCH_CHECK_VALUE(l[j].scalar_type() == inputs[j].scalar_type() &&
                                      l[j].numel() == inputs[j].numel(),
                                  "hoop backend: ", what, " output ", j, " differs from input ", j,
                                  " in dtype or size");
                outs.push_back(l[j]);
            }
        }
        Call c(this, what, c10d::OpType::ALLGATHER_COALESCED, "hoop:all_gather_coalesced", inputs,
               outs);
        at::Tensor send = c.keep(at::empty({nbytes}, at::kByte));
        for (size_t j = 0; j < inputs.size(); j++) {
            int64_t nb = inputs[j].numel() * static_cast<int64_t>(inputs[j].element_size());
            send.narrow(0, offs[j], nb).copy_(inputs[j].contiguous().view({-1}).view(at::kByte));
        }
        at::Tensor recv = c.keep(at::empty({nbytes * size_}, at::kByte));
        c.post([&](hoop_request_t **r) {
            return hoop_iallgather(comm_, send.data_ptr(), recv.data_ptr(), nbytes, HOOP_UINT8, r);
        });
        std::vector<std::vector<at::Tensor>> lists = outputs;
        c.then([recv, lists, offs, nbytes] {
            for (size_t r = 0; r < lists.size(); r++) {
                for (size_t j = 0; j < lists[r].size(); j++) {
                    const at::Tensor &o = lists[r][j];
                    int64_t nb = o.numel() * static_cast<int64_t>(o.element_size());
                    // A copy of its own first: a view as a wider dtype needs an aligned start.
                    at::Tensor b =
                        recv.narrow(0, static_cast<int64_t>(r) * nbytes + offs[j], nb).clone();
                    o.copy_(b.view(o.scalar_type()).view(o.sizes()));
                }
            }
        });
        return c.submit(coll_);
    }

    // hoop's own monitored barrier (hoop.torch, through the group's store), as the Python
    // backend has it: ProcessGroup.monitored_barrier() reaches it here.
    void monitoredBarrier(const c10d::BarrierOptions &opts, bool wait_all_ranks) override
    {
        pybind11::gil_scoped_acquire gil;
        double secs = opts.timeout.count() < 0 ? -1.0 : opts.timeout.count() / 1000.0;
        pybind11::module_::import("hoop.torch")
            .attr("_cxx_monitored_barrier")(getGroupUid(), secs, wait_all_ranks);
    }

    c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::GatherOptions &opts) override
    {
        const at::Tensor &in = one(inputs, "gather");
        int root = static_cast<int>(opts.rootRank);
        check_root(root, "gather");
        std::vector<at::Tensor> outs;
        if (rank_ == root) {
            TORCH_CHECK_VALUE(outputs.size() == 1,
                              "hoop backend: gather takes one output list "
                              "at the root, got ",
                              outputs.size());
            same_shapes(outputs[0], in, size_, "gather", true);
            outs = outputs[0];
        } else {
            TORCH_CHECK_VALUE(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                              "hoop backend: gather takes output tensors at the root only");
        }
        Call c(this, "gather", c10d::OpType::GATHER, "hoop:gather", inputs, outs);
        at::Tensor src = c.in(in);
        at::Tensor f = rank_ == root ? c.temp(in.numel() * size_, in) : at::Tensor();
        c.post([&](hoop_request_t **r) {
            return hoop_igather(comm_, src.data_ptr(), f.defined() ? f.data_ptr() : nullptr,
                                src.numel(), dtype_of(src, ""), root, r);
        });
        if (rank_ == root) c.then([f, outs] { copy_out(f, outs); });
        return c.submit(coll_);
    }

    c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                           std::vector<std::vector<at::Tensor>> &inputs,
                                           const c10d::ScatterOptions &opts) override
    {
        const at::Tensor &out = one(outputs, "scatter", true);
        int root = static_cast<int>(opts.rootRank);
        check_root(root, "scatter");
        std::vector<at::Tensor> ins;
        if (rank_ == root) {
            TORCH_CHECK_VALUE(inputs.size() == 1,
                              "hoop backend: scatter takes one input list "
                              "at the root, got ",
                              inputs.size());
            same_shapes(inputs[0], out, size_, "scatter");
            ins = inputs[0];
        } else {
            TORCH_CHECK_VALUE(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                              "hoop backend: scatter takes input tensors at the root only");
        }
        Call c(this, "scatter", c10d::OpType::SCATTER, "hoop:scatter", ins, outputs);
        at::Tensor f = rank_ == root ? c.keep(flat(ins)) : at::Tensor();
        at::Tensor dst = c.out(out);
        c.post([&](hoop_request_t **r) {
            return hoop_iscatter(comm_, f.defined() ? f.data_ptr() : nullptr, dst.data_ptr(),
                                 dst.numel(), dtype_of(dst, ""), root, r);
        });
        return c.submit(coll_);
    }

    c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                  std::vector<std::vector<at::Tensor>> &inputs,
                                                  const c10d::ReduceScatterOptions &opts) override
    {
        const at::Tensor &out = one(outputs, "reduce_scatter", true);
        TORCH_CHECK_VALUE(inputs.size() == 1,
                          "hoop backend: reduce_scatter takes one input list "
                          "per process, got ",
                          inputs.size());
        same_shapes(inputs[0], out, size_, "reduce_scatter");
        hoop_op_t op = op_of(opts.reduceOp);
        Call c(this, "reduce_scatter", c10d::OpType::REDUCE_SCATTER, "hoop:reduce_scatter",
               inputs[0], outputs);
        at::Tensor f = c.keep(flat(inputs[0]));
        at::Tensor dst = c.out(out);
        c.post([&](hoop_request_t **r) {
            return hoop_ireduce_scatter(comm_, f.data_ptr(), dst.data_ptr(), dst.numel(),
                                        dtype_of(dst, ""), op, r);
        });
        return c.submit(coll_);
    }

    c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
        at::Tensor &output, at::Tensor &input, const c10d::ReduceScatterOptions &opts) override
    {
        check(input, "_reduce_scatter_base");
        check(output, "_reduce_scatter_base", true);
        pair_sizes(input, output, static_cast<int64_t>(size_), "_reduce_scatter_base", true);
        hoop_op_t op = op_of(opts.reduceOp);
        std::vector<at::Tensor> ins{input}, outs{output};
        Call c(this, "_reduce_scatter_base", c10d::OpType::_REDUCE_SCATTER_BASE,
               "hoop:_reduce_scatter_base", ins, outs);
        post_reduce_scatter(c, output, input, op);
        return c.submit(coll_);
    }

    c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
        std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
        const c10d::ReduceScatterOptions &opts) override
    {
        const char *what = "reduce_scatter_tensor_coalesced";
        TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "hoop backend: ", what, " got ",
                          outputs.size(), " outputs for ", inputs.size(), " inputs");
        hoop_op_t op = op_of(opts.reduceOp);
        for (size_t i = 0; i < inputs.size(); i++) {
            check(inputs[i], what);
            check(outputs[i], what, true);
            pair_sizes(inputs[i], outputs[i], static_cast<int64_t>(size_), what, true);
        }
        Call c(this, what, c10d::OpType::COALESCED, "hoop:reduce_scatter_tensor_coalesced", inputs,
               outputs);
        for (size_t i = 0; i < inputs.size(); i++)
            post_reduce_scatter(c, outputs[i], inputs[i], op);
        return c.submit(coll_);
    }

    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                                 std::vector<int64_t> &out_splits,
                                                 std::vector<int64_t> &in_splits,
                                                 const c10d::AllToAllOptions &) override
    {
        const char *what = "alltoall_base";
        check(input, what);
        check(output, what, true);
        TORCH_CHECK_VALUE(input.scalar_type() == output.scalar_type(), "hoop backend: ", what,
                          " got input dtype ", input.scalar_type(), " and output dtype ",
                          output.scalar_type());
        std::vector<at::Tensor> ins{input}, outs{output};
        Call c(this, what, c10d::OpType::ALLTOALL_BASE, "hoop:all_to_all", ins, outs);
        if (out_splits.empty() && in_splits.empty()) {
            TORCH_CHECK_VALUE(input.numel() == output.numel() && input.numel() % size_ == 0,
                              "hoop backend: ", what,
                              " needs input and output of one size "
                              "that the ",
                              size_, " ranks divide, got ", input.numel(), " and ", output.numel());
            at::Tensor src = c.in(input);
            at::Tensor dst = c.out(output);
            c.post([&](hoop_request_t **r) {
                return hoop_ialltoall(comm_, src.data_ptr(), dst.data_ptr(), src.numel() / size_,
                                      dtype_of(src, ""), r);
            });
            return c.submit(coll_);
        }
        auto ib = blocks(input, in_splits, what);
        auto ob = blocks(output, out_splits, what);
        at::Tensor src = c.in(input);
        at::Tensor dst = c.out(output);
        std::vector<at::Tensor> sends, recvs;
        for (int p = 0; p < size_; p++) {
            sends.push_back(src.narrow(0, ib[p].first, ib[p].second));
            recvs.push_back(dst.narrow(0, ob[p].first, ob[p].second));
        }
        post_exchange(c, sends, recvs, what);
        return c.submit(coll_);
    }

    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                            std::vector<at::Tensor> &inputs,
                                            const c10d::AllToAllOptions &) override
    {
        const char *what = "alltoall";
        TORCH_CHECK_VALUE(outputs.size() == static_cast<size_t>(size_) &&
                              inputs.size() == static_cast<size_t>(size_),
                          "hoop backend: ", what, " needs ", size_,
                          " input and output tensors (one per rank), got ", inputs.size(), " and ",
                          outputs.size());
        for (int p = 0; p < size_; p++) {
            check(inputs[p], what);
            check(outputs[p], what, true);
            TORCH_CHECK_VALUE(inputs[p].scalar_type() == outputs[p].scalar_type(),
                              "hoop backend: ", what, " got input dtype ", inputs[p].scalar_type(),
                              " and output dtype ", outputs[p].scalar_type());
        }
        Call c(this, what, c10d::OpType::ALLTOALL, "hoop:all_to_all", inputs, outputs);
        std::vector<at::Tensor> sends, recvs;
        for (int p = 0; p < size_; p++) {
            sends.push_back(c.in(inputs[p]).reshape({-1}));
            recvs.push_back(c.out(outputs[p]).reshape({-1}));
        }
        post_exchange(c, sends, recvs, what);
        return c.submit(coll_);
    }

    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &) override
    {
        std::vector<at::Tensor> none;
        Call c(this, "barrier", c10d::OpType::BARRIER, "hoop:barrier", none, none);
        c.post([&](hoop_request_t **r) { return hoop_ibarrier(comm_, r); });
        return c.submit(coll_);
    }

    // ---- point to point

    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst, int) override
    {
        const at::Tensor &t = one(tensors, "send");
        check_peer(dst, "send");
        Call c(this, "send", c10d::OpType::SEND, "hoop:send", tensors, tensors);
        at::Tensor src = c.in(t);
        c.post([&](hoop_request_t **r) {
            return hoop_isend(comm_, src.data_ptr(), src.numel(), dtype_of(src, ""), dst, r);
        });
        return c.submit(lane("send", dst));
    }

    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src, int) override
    {
        const at::Tensor &t = one(tensors, "recv", true);
        check_peer(src, "recv");
        Call c(this, "recv", c10d::OpType::RECV, "hoop:recv", tensors, tensors);
        at::Tensor dst = c.out(t);
        c.post([&](hoop_request_t **r) {
            return hoop_irecv(comm_, dst.data_ptr(), dst.numel(), dtype_of(dst, ""), src, r);
        });
        return c.submit(lane("recv", src));
    }

    c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors, int) override
    {
        const at::Tensor &t = one(tensors, "recvAnysource", true);
        Call c(this, "recvAnysource", c10d::OpType::RECVANYSOURCE, "hoop:recvAnySource", tensors,
               tensors);
        at::Tensor dst = c.out(t);
        HoopWork *w = c.work.get();
        c.post([&](hoop_request_t **r) {
            return hoop_irecv_any(comm_, dst.data_ptr(), dst.numel(), dtype_of(dst, ""),
                                  &w->any_source_, r);
        });
        return c.submit(lane("any", -1));
    }

  private:
    // Builds one operation: its Work, the temporaries, the hoop calls, then its lane.
    struct Call {
        Call(HoopBackend *b, const char *what, c10d::OpType type, const char *title,
             const std::vector<at::Tensor> &inputs, const std::vector<at::Tensor> &outputs)
            : b(b), g(b->post_m_), op(new Op)
        {
            TORCH_CHECK(b->comm_ != nullptr, "hoop backend: ", what,
                        " on a process group that was shut down");
            op->what = what;
            work = c10::make_intrusive<HoopWork>(b->rank_, type, title, inputs, outputs, nullptr,
                                                 b->limit_);
            for (const auto &t : inputs) op->keep.push_back(t);
            for (const auto &t : outputs) op->keep.push_back(t);
        }
        at::Tensor keep(at::Tensor t)
        {
            op->keep.push_back(t);
            return t;
        }
        // An input hoop reads: the tensor, or a contiguous copy.
        at::Tensor in(const at::Tensor &t) { return keep(t.contiguous()); }
        // An output hoop writes: the tensor, or a contiguous temporary copied back at the end.
        at::Tensor out(const at::Tensor &t)
        {
            if (t.is_contiguous()) return keep(t);
            at::Tensor tmp = keep(at::empty_like(t, at::MemoryFormat::Contiguous));
            then([tmp, t]() mutable { t.copy_(tmp); });
            return tmp;
        }
        // Read and written in place (broadcast, reduce): the copy carries the input in.
        at::Tensor inout(const at::Tensor &t)
        {
            if (t.is_contiguous()) return keep(t);
            at::Tensor tmp = keep(t.contiguous());
            then([tmp, t]() mutable { t.copy_(tmp); });
            return tmp;
        }
        at::Tensor temp(int64_t n, const at::Tensor &like)
        {
            return keep(at::empty({n}, like.options().memory_format(at::MemoryFormat::Contiguous)));
        }
        void then(std::function<void()> f)
        {
            auto prev = std::move(op->post);
            op->post = [prev, f] {
                if (prev) prev();
                f();
            };
        }
        template <class F> void post(F &&f)
        {
            if (op->posting_error) return;
            hoop_request_t *r = nullptr;
            hoop_result_t rc = f(&r);
            if (rc != HOOP_OK) {
                op->posting_error = backend_error("hoop backend: " + op->what +
                                                  " failed: " + hoop_error_string(rc) + ": " +
                                                  hoop_comm_last_error(b->comm_));
                return;
            }
            op->reqs.push_back(r);
        }
        c10::intrusive_ptr<c10d::Work> submit(const std::shared_ptr<Lane> &l)
        {
            // A call none of whose requests was posted fails at once; one partly posted goes to
            // its lane, which waits for what was posted (its buffers stay alive until then).
            if (op->posting_error && op->reqs.empty()) std::rethrow_exception(op->posting_error);
            work->set_lane(l);
            if (l == b->coll_) b->seq_++;
            auto w = work;
            op->work = w;
            auto err = op->posting_error;
            l->push(std::move(op));
            if (err) std::rethrow_exception(err);
            return w;
        }
        HoopBackend *b;
        std::lock_guard<std::mutex> g;
        std::unique_ptr<Op> op;
        c10::intrusive_ptr<HoopWork> work;
    };

    c10::intrusive_ptr<c10d::Work> reduce_each(const char *what, c10d::OpType type,
                                               const char *title, std::vector<at::Tensor> &tensors,
                                               hoop_op_t op)
    {
        Call c(this, what, type, title, tensors, tensors);
        for (const auto &t : tensors) {
            at::Tensor b = c.inout(t);
            c.post([&](hoop_request_t **r) {
                return hoop_iallreduce(comm_, b.data_ptr(), b.data_ptr(), b.numel(),
                                       dtype_of(b, ""), op, r);
            });
        }
        return c.submit(coll_);
    }

    // ---- sparse COO all-reduce

    // The sum of every rank's sparse COO tensor, into each of tensors, as gloo's: the ranks
    // exchange headers (layout, dtype, op, entry count, shape) and compare them before any entry
    // moves, so that a disagreement raises on every rank; then every rank's indices and values,
    // padded to the largest entry count, are gathered and added up here. Blocking (three
    // gathers, waited in turn); the Work it returns completes on the collectives' lane, after
    // the collectives posted before it, so that future callbacks keep their order.
    c10::intrusive_ptr<c10d::Work> sparse_allreduce(std::vector<at::Tensor> &tensors,
                                                    const c10d::ReduceOp &op)
    {
        for (const auto &t : tensors) {
            TORCH_CHECK_VALUE(t.defined() && t.is_sparse(),
                              "hoop backend: allreduce mixes sparse and dense tensors");
            TORCH_CHECK_VALUE(t.device().is_cpu(), "hoop backend: allreduce got a sparse ",
                              t.device().type(),
                              " tensor; the C++ backend takes CPU tensors only "
                              "(HOOP_TORCH_BACKEND=python selects the Python one, which serves "
                              "CUDA tensors)");
        }
        for (auto &t : tensors) sparse_sum(t, static_cast<int64_t>(op.op_));
        Call c(this, "allreduce", c10d::OpType::ALLREDUCE, "hoop:all_reduce", tensors, tensors);
        return c.submit(coll_);
    }

    static constexpr int64_t kSparseDims = 16; // the most dimensions a header has room for

    static const char *op_name(int64_t op)
    {
        switch (op) {
        case c10d::ReduceOp::SUM: return "SUM";
        case c10d::ReduceOp::AVG: return "AVG";
        case c10d::ReduceOp::PRODUCT: return "PRODUCT";
        case c10d::ReduceOp::MIN: return "MIN";
        case c10d::ReduceOp::MAX: return "MAX";
        case c10d::ReduceOp::BAND: return "BAND";
        case c10d::ReduceOp::BOR: return "BOR";
        case c10d::ReduceOp::BXOR: return "BXOR";
        case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
        default: return "an unknown op";
        }
    }

    static std::string dtype_name(int64_t code)
    {
        if (code < 0 || code >= static_cast<int64_t>(c10::ScalarType::NumOptions))
            return "an unknown dtype";
        return c10::toString(static_cast<c10::ScalarType>(code));
    }

    // src gathered from every rank into dst, waited for here.
    void gather_now(const at::Tensor &src, const at::Tensor &dst)
    {
        const char *what = "sparse allreduce";
        hoop_request_t *r = nullptr;
        hoop_result_t rc;
        {
            std::lock_guard<std::mutex> g(post_m_);
            TORCH_CHECK(comm_ != nullptr, "hoop backend: ", what,
                        " on a process group that was shut down");
            rc = hoop_iallgather(comm_, src.data_ptr(), dst.data_ptr(), src.numel(),
                                 dtype_of(src, what), &r);
        }
        if (rc == HOOP_OK) rc = hoop_wait(r);
        if (rc != HOOP_OK) std::rethrow_exception(call_error(comm_, what, rc));
    }

    void sparse_sum(at::Tensor &t, int64_t op)
    {
        const int64_t hn = 5 + kSparseDims;
        TORCH_CHECK_VALUE(t.dim() <= kSparseDims, "hoop backend: sparse allreduce takes at most ",
                          kSparseDims, " dimensions, got ", t.dim());
        at::Tensor c = t.coalesce();
        at::Tensor idx = c._indices();
        at::Tensor val = c._values();
        int64_t nnz = c._nnz();
        at::Tensor head = at::full({hn}, -1, at::kLong);
        int64_t *h = head.data_ptr<int64_t>();
        h[0] = c.sparse_dim();
        h[1] = c.dense_dim();
        h[2] = static_cast<int64_t>(val.scalar_type());
        h[3] = op;
        h[4] = nnz;
        for (int64_t d = 0; d < t.dim(); d++) h[5 + d] = t.size(d);
        at::Tensor heads = at::empty({size_ * hn}, at::kLong);
        gather_now(head, heads);
        const int64_t *hs = heads.data_ptr<int64_t>();
        int64_t most = 0;
        for (int r = 0; r < size_; r++) { // every rank sees every header: all raise together
            const int64_t *o = hs + r * hn;
            TORCH_CHECK_VALUE(o[3] == op, "hoop backend: sparse allreduce: rank ", rank_,
                              " reduces with ", op_name(op), ", rank ", r, " with ", op_name(o[3]));
            bool same = true;
            for (int64_t k = 0; k < hn; k++) same = same && (k == 4 || o[k] == h[k]);
            std::vector<int64_t> shape;
            for (int64_t k = 5; k < hn && o[k] >= 0; k++) shape.push_back(o[k]);
            TORCH_CHECK_VALUE(same, "hoop backend: sparse allreduce: rank ", rank_, " has a ",
                              val.scalar_type(), " tensor of shape ", t.sizes(), " (", h[0],
                              " sparse dims), rank ", r, " one of ", dtype_name(o[2]), ", shape ",
                              c10::IntArrayRef(shape), " (", o[0], " sparse dims)");
            most = std::max(most, o[4]);
        }
        // After the comparison, so that every rank raises alike.
        TORCH_CHECK_VALUE(op == c10d::ReduceOp::SUM,
                          "hoop backend: a sparse allreduce sums only (got op ", op_name(op), ")");
        dtype_of(val, "sparse allreduce");
        std::vector<at::Tensor> is, vs;
        if (most > 0) {
            at::Tensor ipad = at::zeros({c.sparse_dim(), most}, at::kLong);
            ipad.narrow(1, 0, nnz).copy_(idx);
            std::vector<int64_t> vshape = val.sizes().vec();
            vshape[0] = most;
            at::Tensor vpad = at::zeros(vshape, val.options());
            vpad.narrow(0, 0, nnz).copy_(val);
            at::Tensor iall = at::empty({size_, c.sparse_dim(), most}, at::kLong);
            vshape.insert(vshape.begin(), size_);
            at::Tensor vall = at::empty(vshape, val.options());
            gather_now(ipad, iall);
            gather_now(vpad, vall);
            for (int r = 0; r < size_; r++) {
                is.push_back(iall[r].narrow(1, 0, hs[r * hn + 4]));
                vs.push_back(vall[r].narrow(0, 0, hs[r * hn + 4]));
            }
        } else {
            is.push_back(idx);
            vs.push_back(val);
        }
        t.copy_(at::sparse_coo_tensor(at::cat(is, 1), at::cat(vs, 0), t.sizes()).coalesce());
    }

    // big holds n times small's elements, same dtype.
    static void pair_sizes(const at::Tensor &big, const at::Tensor &small, int64_t n,
                           const char *what, bool big_is_input)
    {
        TORCH_CHECK_VALUE(big.scalar_type() == small.scalar_type(), "hoop backend: ", what,
                          " got dtypes ", big.scalar_type(), " and ", small.scalar_type());
        TORCH_CHECK_VALUE(big.numel() == small.numel() * n, "hoop backend: ", what, " needs the ",
                          big_is_input ? "input" : "output", " to hold ", n, " times the ",
                          big_is_input ? "output's" : "input's", " ", small.numel(),
                          " elements, got ", big.numel());
    }

    void post_allgather(Call &c, const at::Tensor &output, const at::Tensor &input)
    {
        at::Tensor src = c.in(input);
        at::Tensor dst = c.out(output);
        c.post([&](hoop_request_t **r) {
            return hoop_iallgather(comm_, src.data_ptr(), dst.data_ptr(), src.numel(),
                                   dtype_of(src, ""), r);
        });
    }

    void post_reduce_scatter(Call &c, const at::Tensor &output, const at::Tensor &input,
                             hoop_op_t op)
    {
        at::Tensor src = c.in(input);
        at::Tensor dst = c.out(output);
        c.post([&](hoop_request_t **r) {
            return hoop_ireduce_scatter(comm_, src.data_ptr(), dst.data_ptr(), dst.numel(),
                                        dtype_of(dst, ""), op, r);
        });
    }

    // (offset, rows) along dim 0 of each rank's block; splits empty: equal blocks.
    std::vector<std::pair<int64_t, int64_t>> blocks(const at::Tensor &t,
                                                    const std::vector<int64_t> &splits,
                                                    const char *what)
    {
        int64_t rows = t.dim() == 0 ? 1 : t.size(0);
        std::vector<std::pair<int64_t, int64_t>> b;
        if (splits.empty()) {
            TORCH_CHECK_VALUE(rows % size_ == 0, "hoop backend: ", what, ": ", rows,
                              " rows do not split into ", size_, " equal blocks");
            for (int p = 0; p < size_; p++) b.emplace_back(p * (rows / size_), rows / size_);
            return b;
        }
        TORCH_CHECK_VALUE(splits.size() == static_cast<size_t>(size_), "hoop backend: ", what,
                          " needs ", size_, " split sizes, got ", splits.size());
        int64_t off = 0;
        for (int64_t s : splits) {
            TORCH_CHECK_VALUE(s >= 0, "hoop backend: ", what, " got a negative split size");
            b.emplace_back(off, s);
            off += s;
        }
        TORCH_CHECK_VALUE(off == rows, "hoop backend: ", what, ": split sizes add up to ", off,
                          " rows, the tensor has ", rows);
        return b;
    }

    // Blocks of unequal sizes: one receive and one send per peer, all posted before any is
    // waited for, the own block copied.
    void post_exchange(Call &c, const std::vector<at::Tensor> &sends,
                       const std::vector<at::Tensor> &recvs, const char *)
    {
        for (int p = 0; p < size_; p++) {
            if (p == rank_) continue;
            const at::Tensor &d = recvs[p];
            c.post([&](hoop_request_t **r) {
                return hoop_irecv(comm_, d.data_ptr(), d.numel(), dtype_of(d, ""), p, r);
            });
        }
        for (int p = 0; p < size_; p++) {
            if (p == rank_) continue;
            const at::Tensor &s = sends[p];
            c.post([&](hoop_request_t **r) {
                return hoop_isend(comm_, s.data_ptr(), s.numel(), dtype_of(s, ""), p, r);
            });
        }
        TORCH_CHECK_VALUE(sends[rank_].numel() == recvs[rank_].numel(), "hoop backend: the own "
                                                                        "block differs in size");
        recvs[rank_].copy_(sends[rank_]);
    }

    void check_root(int root, const char *what)
    {
        TORCH_CHECK_VALUE(root >= 0 && root < size_, "hoop backend: ", what, " root ", root,
                          " is not a rank of this group of ", size_);
    }
    void check_peer(int peer, const char *what)
    {
        TORCH_CHECK_VALUE(peer >= 0 && peer < size_ && peer != rank_, "hoop backend: ", what,
                          " peer ", peer, " is not another rank of this group of ", size_);
    }

    std::shared_ptr<Lane> lane_locked(const std::string &key)
    {
        auto it = lanes_.find(key);
        if (it != lanes_.end()) return it->second;
        auto l = std::make_shared<Lane>(comm_, key);
        l->start();
        lanes_[key] = l;
        return l;
    }
    // Called with post_m_ held (inside a Call).
    std::shared_ptr<Lane> lane(const char *kind, int peer)
    {
        return lane_locked(std::string(kind) + ":" + std::to_string(peer));
    }

    void watch()
    {
        std::unique_lock<std::mutex> g(post_m_);
        while (!stopping_) {
            watch_cv_.wait_for(g, std::chrono::milliseconds(50));
            auto now = Clock::now();
            for (auto &l : lanes_) l.second->watch(now, std::chrono::milliseconds(100));
        }
    }

    hoop_comm_t *comm_ = nullptr;
    std::chrono::milliseconds limit_;
    std::mutex post_m_; // hoop takes one posting thread at a time per communicator
    std::map<std::string, std::shared_ptr<Lane>> lanes_;
    std::shared_ptr<Lane> coll_;
    std::thread watchdog_;
    std::condition_variable watch_cv_;
    bool stopping_ = false;
    std::atomic<uint64_t> seq_{0};
};

} // namespace hoop_torch

PYBIND11_MODULE(_c10d, m)
{
    m.doc() = "hoop's C++ c10d::Backend (torch >= 2.0)";
    m.def(
        "create",
        [](const std::string &method, int rank, int size, double timeout_s) {
            c10::intrusive_ptr<c10d::Backend> b;
            {
                pybind11::gil_scoped_release nogil; // joining waits for every rank
                b = c10::make_intrusive<hoop_torch::HoopBackend>(method, rank, size, timeout_s);
            }
            return b;
        },
        pybind11::arg("method"), pybind11::arg("rank"), pybind11::arg("size"),
        pybind11::arg("timeout"));
}
