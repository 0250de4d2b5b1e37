// stile-serve's parts without a model: the batch queue's admission and batching rules, the request
// readers' shapes and refusals, and the wire formats of the answers.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "serve/api_requests.hpp"
#include "serve/batch_queue.hpp"
#include "serve/metrics.hpp"
#include "serve/responses.hpp"

namespace {

using namespace std::chrono_literals;
using Catch::Matchers::Contains;

struct TestJob : stile_serve::QueuedJob {
  int id = 0;
};

// A run_batch that records each batch's job ids and holds the first batch until released, so the
// test can queue jobs behind it deterministically.
struct Recorder {
  std::mutex mutex;
  std::condition_variable cv;
  bool released = false;
  bool first_started = false;
  std::vector<std::vector<int>> batches;

  void run(std::span<TestJob* const> jobs) {
    std::unique_lock lock(mutex);
    std::vector<int> ids;
    for (const TestJob* j : jobs) ids.push_back(j->id);
    batches.push_back(ids);
    if (batches.size() == 1) {
      first_started = true;
      cv.notify_all();
      cv.wait(lock, [&] { return released; });
    }
    if (ids.front() == 99) throw std::runtime_error("the encoder failed");
  }
  void wait_first() {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return first_started; });
  }
  void release() {
    std::lock_guard lock(mutex);
    released = true;
    cv.notify_all();
  }
};

// Waits until the queue holds n jobs (submitters run on their own threads).
template <class Queue>
void wait_queued(const Queue& q, std::size_t n) {
  while (q.queued() < n) std::this_thread::sleep_for(1ms);
}

}  // namespace

TEST_CASE("the batch queue batches by key and token budget, in arrival order", "[serve]") {
  Recorder rec;
  stile_serve::BatchQueue<TestJob> queue(16, 100, 16, [&](std::span<TestJob* const> jobs) { rec.run(jobs); });
  // (id, key, tokens): 1 runs alone and holds the worker; then 2,3 fit one batch (60 + 40), 4 would
  // overflow it, 5 has another key, 6 is key 0 again but behind 5.
  const std::vector<std::tuple<int, int, std::size_t>> specs = {{1, 0, 10}, {2, 0, 60}, {3, 0, 40},
                                                                {4, 0, 1},  {5, 1, 5},  {6, 0, 5}};
  std::vector<TestJob> jobs(specs.size());
  std::vector<std::thread> threads;
  std::vector<stile_serve::SubmitResult> results(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    jobs[i].id = std::get<0>(specs[i]);
    jobs[i].batch_key = std::get<1>(specs[i]);
    jobs[i].tokens = std::get<2>(specs[i]);
    threads.emplace_back([&, i] { results[i] = queue.submit(jobs[i], 10s); });
    if (i == 0)
      rec.wait_first();
    else
      wait_queued(queue, i);  // one at a time, so the arrival order is the listed one
  }
  rec.release();
  for (std::thread& t : threads) t.join();
  for (const auto r : results) CHECK(r == stile_serve::SubmitResult::kDone);
  const std::vector<std::vector<int>> want = {{1}, {2, 3}, {4}, {5}, {6}};
  CHECK(rec.batches == want);
}

TEST_CASE("a job over the budget runs alone; max_batch_jobs caps a batch", "[serve]") {
  Recorder rec;
  stile_serve::BatchQueue<TestJob> queue(16, 10, 2, [&](std::span<TestJob* const> jobs) { rec.run(jobs); });
  std::vector<TestJob> jobs(5);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].id = static_cast<int>(i);
    jobs[i].tokens = i == 1 ? 50 : 1;
    threads.emplace_back([&, i] { CHECK(queue.submit(jobs[i], 10s) == stile_serve::SubmitResult::kDone); });
    if (i == 0)
      rec.wait_first();
    else
      wait_queued(queue, i);
  }
  rec.release();
  for (std::thread& t : threads) t.join();
  const std::vector<std::vector<int>> want = {{0}, {1}, {2, 3}, {4}};
  CHECK(rec.batches == want);
}

TEST_CASE("a full queue refuses at once; a job that waits too long is taken out unrun", "[serve]") {
  Recorder rec;
  stile_serve::BatchQueue<TestJob> queue(1, 100, 16, [&](std::span<TestJob* const> jobs) { rec.run(jobs); });
  TestJob first, queued, refused, late;
  first.id = 1;
  queued.id = 2;
  std::thread t1([&] { CHECK(queue.submit(first, 10s) == stile_serve::SubmitResult::kDone); });
  rec.wait_first();
  std::thread t2([&] { CHECK(queue.submit(queued, 10s) == stile_serve::SubmitResult::kDone); });
  wait_queued(queue, 1);
  CHECK(queue.submit(refused, 10s) == stile_serve::SubmitResult::kQueueFull);
  rec.release();
  t1.join();
  t2.join();

  // Held again: a job with a short timeout behind a held one times out and never runs.
  Recorder held;
  stile_serve::BatchQueue<TestJob> q2(4, 100, 1, [&](std::span<TestJob* const> jobs) { held.run(jobs); });
  TestJob a, b;
  a.id = 1;
  b.id = 2;
  std::thread ta([&] { CHECK(q2.submit(a, 10s) == stile_serve::SubmitResult::kDone); });
  held.wait_first();
  CHECK(q2.submit(b, 20ms) == stile_serve::SubmitResult::kTimedOut);
  CHECK(q2.queued() == 0);
  held.release();
  ta.join();
  q2.stop();
  CHECK(held.batches == std::vector<std::vector<int>>{{1}});
  CHECK(q2.submit(late, 10s) == stile_serve::SubmitResult::kStopped);
}

TEST_CASE("a failing batch fails its jobs only; stop runs what was queued", "[serve]") {
  Recorder rec;
  rec.release();
  stile_serve::BatchQueue<TestJob> queue(4, 100, 16, [&](std::span<TestJob* const> jobs) { rec.run(jobs); });
  TestJob bad, good;
  bad.id = 99;
  good.id = 1;
  CHECK(queue.submit(bad, 10s) == stile_serve::SubmitResult::kDone);
  REQUIRE(bad.error);
  CHECK_THROWS_WITH(std::rethrow_exception(bad.error), "the encoder failed");
  CHECK(queue.submit(good, 10s) == stile_serve::SubmitResult::kDone);
  CHECK_FALSE(good.error);
}

TEST_CASE("the request readers take each API's shapes", "[serve]") {
  const stile_serve::Limits limits{.max_texts = 3};
  const auto e = stile_serve::parse_openai_embeddings(
      R"({"input": ["a", "b"], "model": "m", "encoding_format": "base64", "dimensions": 8, "user": "u"})", limits);
  CHECK(e.texts == std::vector<std::string>{"a", "b"});
  CHECK(e.base64);
  CHECK(e.dimensions == 8u);
  CHECK(stile_serve::parse_openai_embeddings(R"({"input": "one"})", limits).texts == std::vector<std::string>{"one"});
  const auto t = stile_serve::parse_tei_embed(R"({"inputs": "x", "normalize": false, "truncate": true})", limits);
  CHECK((t.normalize == false && t.truncate == true));
  const auto r = stile_serve::parse_rerank(R"({"query": "q", "texts": ["a"], "return_text": true})", limits);
  CHECK((r.query == "q" && r.return_text && !r.raw_scores));
  // text-embeddings-inference's predict: ["a", "b"] is one pair; ["a", "b", "c"] three texts.
  const auto pair = stile_serve::parse_classify(R"({"inputs": ["a", "b"]})", limits);
  CHECK((pair.single && pair.inputs.size() == 1 && pair.inputs[0].second == "b"));
  const auto three = stile_serve::parse_classify(R"({"inputs": ["a", "b", "c"]})", limits);
  CHECK((!three.single && three.inputs.size() == 3 && !three.inputs[2].second));
  const auto mixed = stile_serve::parse_classify(R"({"inputs": [["a", "b"], "c"], "target_ms": 40})", limits);
  CHECK((mixed.inputs.size() == 2 && mixed.inputs[0].second == "b" && mixed.target_ms == 40.0));
}

TEST_CASE("the request readers refuse by field, with 400 or 413", "[serve]") {
  const stile_serve::Limits limits{.max_texts = 3};
  const auto refusal = [&](const char* body) {
    try {
      (void)stile_serve::parse_openai_embeddings(body, limits);
    } catch (const stile_serve::ApiError& e) {
      return e;
    }
    FAIL("accepted: " << body);
    return stile_serve::ApiError{};
  };
  CHECK(refusal(R"({"input": [)").status == 400);
  CHECK(refusal(R"([1])").status == 400);
  CHECK(refusal(R"({"input": "a", "input": "b"})").message.find("twice") != std::string::npos);
  CHECK(refusal(R"({"input": 1})").param == "input");
  CHECK(refusal(R"({"input": []})").param == "input");
  CHECK_THAT(refusal(R"({"input": [[1, 2]]})").message, Contains("token ids"));
  CHECK(refusal(R"({"input": ["a", "b", "c", "d"]})").status == 413);
  CHECK(refusal(R"({"input": "a", "temperature": 0})").param == "temperature");
  CHECK(refusal(R"({"input": "a", "encoding_format": "int8"})").param == "encoding_format");
  CHECK(refusal(R"({"input": "a", "dimensions": -1})").param == "dimensions");
  CHECK(refusal(R"({"input": "a", "target_ms": 0})").param == "target_ms");
  CHECK(refusal(R"({"input": "a", "model": 3})").param == "model");
  CHECK(refusal(R"({"input": [[[[["a"]]]]]})").message.find("nests deeper") != std::string::npos);
  CHECK_THROWS_AS(stile_serve::parse_rerank(R"({"query": "q", "texts": "a"})", limits), stile_serve::ApiError);
  CHECK_THROWS_AS(stile_serve::parse_classify(R"({"inputs": [["a", "b", "c"]]})", limits), stile_serve::ApiError);
  CHECK_THROWS_AS(stile_serve::parse_tei_embed(R"({"inputs": "a", "truncation_direction": "Left"})", limits),
                  stile_serve::ApiError);
}

TEST_CASE("the answers' wire formats", "[serve]") {
  // RFC 4648's test vectors.
  const auto b64 = [](std::string_view s) { return stile_serve::base64(std::as_bytes(std::span(s.data(), s.size()))); };
  CHECK(b64("") == "");
  CHECK(b64("f") == "Zg==");
  CHECK(b64("fo") == "Zm8=");
  CHECK(b64("foo") == "Zm9v");
  CHECK(b64("foobar") == "Zm9vYmFy");
  const float one[] = {1.0f};
  CHECK(stile_serve::base64_floats(one) == "AACAPw==");  // 0x3F800000, little-endian
  // Floats print in their shortest form that reads back to the same float.
  const std::vector<std::vector<float>> rows = {{0.1f, -2.5f}};
  CHECK(
      stile_serve::openai_embeddings(rows, false, "m", 3, "") ==
      R"({"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,-2.5]}],"model":"m","usage":{"prompt_tokens":3,"total_tokens":3}})");
  const double scores[] = {0.2, 0.9, 0.2};
  const std::string texts[] = {"a", "b", "c"};
  CHECK(
      stile_serve::tei_rerank(scores, texts, true) ==
      R"([{"index":1,"score":0.9,"text":"b"},{"index":0,"score":0.2,"text":"a"},{"index":2,"score":0.2,"text":"c"}])");
  CHECK(stile_serve::error_body(stile_serve::Api::kOpenAi, 400, "bad \"x\"", "input") ==
        R"({"error":{"message":"bad \"x\"","type":"invalid_request_error","param":"input","code":null}})");
  CHECK(stile_serve::error_body(stile_serve::Api::kTei, 503, "busy", "") ==
        R"({"error":"busy","error_type":"Overloaded"})");
}

TEST_CASE("the metrics are Prometheus text", "[serve]") {
  stile_serve::Metrics m;
  m.record_request("/v1/embeddings", 200, 0.004);
  m.record_request("/v1/embeddings", 200, 0.2);
  m.record_request("/v1/embeddings", 503, 0.0);
  m.record_batch(3, 42);
  m.record_deadline_miss();
  const std::string text = m.render(2);
  CHECK_THAT(text, Contains("stile_requests_total{endpoint=\"/v1/embeddings\",status=\"200\"} 2\n"));
  CHECK_THAT(text, Contains("stile_requests_total{endpoint=\"/v1/embeddings\",status=\"503\"} 1\n"));
  CHECK_THAT(text, Contains("stile_request_duration_seconds_bucket{endpoint=\"/v1/embeddings\",le=\"0.005\"} 2\n"));
  CHECK_THAT(text, Contains("stile_request_duration_seconds_bucket{endpoint=\"/v1/embeddings\",le=\"0.1\"} 2\n"));
  CHECK_THAT(text, Contains("stile_request_duration_seconds_bucket{endpoint=\"/v1/embeddings\",le=\"0.25\"} 3\n"));
  CHECK_THAT(text, Contains("stile_request_duration_seconds_count{endpoint=\"/v1/embeddings\"} 3\n"));
  CHECK_THAT(text, Contains("stile_tokens_total 42\n"));
  CHECK_THAT(text, Contains("stile_deadline_misses_total 1\n"));
  CHECK_THAT(text, Contains("stile_queue_depth 2\n"));
}
