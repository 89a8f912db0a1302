// http/server.h against raw POSIX sockets, so that every byte of the
// framing is checked, and against curl.
#include "http/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/http_client.h"
#include "tests/test_util.h"

namespace waste::http {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using Client = waste::testing::HttpClient;

HttpOptions TestOptions() {
  HttpOptions o;
  o.port = 0;
  return o;
}

std::unique_ptr<HttpServer> StartOrDie(HttpOptions options, HttpServer::Handler handler) {
  auto s = HttpServer::Start(std::move(options), std::move(handler));
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? std::move(*s) : nullptr;
}

// Requests and their responders, handed from the loop thread to the test's.
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Request> requests;
  std::vector<std::shared_ptr<Responder>> responders;

  void Put(Request r, std::shared_ptr<Responder> responder) {
    std::lock_guard lock(mu);
    requests.push_back(std::move(r));
    responders.push_back(std::move(responder));
    cv.notify_all();
  }
  // The i-th responder, waiting for it up to two seconds.
  std::shared_ptr<Responder> Wait(size_t i) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, 2s, [&] { return responders.size() > i; });
    return responders.size() > i ? responders[i] : nullptr;
  }
  Request RequestAt(size_t i) {
    std::lock_guard lock(mu);
    return requests.at(i);
  }
};

bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout = 2000ms) {
  const auto deadline = Clock::now() + timeout;
  while (!condition()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

std::string ErrorBody(std::string_view message) {
  return std::string(R"({"error":{"message":")") + std::string(message) +
         R"(","type":"invalid_request_error","param":null,"code":null}})";
}

std::string ErrorAnswer(std::string_view status_line, std::string_view message) {
  const std::string body = ErrorBody(message);
  return std::string(status_line) +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

TEST(HttpServer, StartsOnTheAddressAskedAndRefusesBadOnes) {
  auto s = StartOrDie(TestOptions(), [](Request, std::shared_ptr<Responder>) {});
  ASSERT_TRUE(s);
  EXPECT_NE(s->port(), 0);
  EXPECT_EQ(s->address(), "127.0.0.1:" + std::to_string(s->port()));
  EXPECT_TRUE(s->loopback());

  HttpOptions taken = TestOptions();
  taken.port = s->port();
  auto again = HttpServer::Start(taken, [](Request, std::shared_ptr<Responder>) {});
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("listen on 127.0.0.1:" + std::to_string(s->port())),
            std::string::npos)
      << again.status().message();

  HttpOptions bad = TestOptions();
  bad.host = "example.com";
  auto named = HttpServer::Start(bad, [](Request, std::shared_ptr<Responder>) {});
  ASSERT_FALSE(named.ok());
  EXPECT_NE(named.status().message().find("not an IPv4 or IPv6 address"), std::string::npos);

  HttpOptions tiny = TestOptions();
  tiny.max_header_bytes = 10;
  EXPECT_FALSE(HttpServer::Start(tiny, [](Request, std::shared_ptr<Responder>) {}).ok());
}

TEST(HttpServer, GetRoundTrip) {
  Inbox inbox;
  auto s = StartOrDie(TestOptions(), [&](Request r, std::shared_ptr<Responder> responder) {
    responder->Send(200, "text/plain", "hello " + r.path, {{"X-Reply", "1"}});
    inbox.Put(std::move(r), responder);
  });
  Client c(s->port());
  c.Send(
      "GET /v1/models?x=1&y=2 HTTP/1.1\r\nHost: h\r\nX-Thing:  Yes  \r\nx-thing: second\r\n\r\n");
  EXPECT_EQ(
      c.ReadAnswer(),
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Reply: 1\r\nContent-Length: 16\r\n\r\n"
      "hello /v1/models");
  ASSERT_TRUE(inbox.Wait(0));
  const Request r = inbox.RequestAt(0);
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.target, "/v1/models?x=1&y=2");
  EXPECT_EQ(r.path, "/v1/models");
  EXPECT_EQ(r.query, "x=1&y=2");
  EXPECT_EQ(r.http_minor, 1);
  EXPECT_EQ(r.peer.rfind("127.0.0.1:", 0), 0u) << r.peer;
  EXPECT_EQ(r.Header("x-thing"), "Yes");
  EXPECT_EQ(r.Header("X-THING"), "Yes");
  EXPECT_EQ(r.Header("host"), "h");
  EXPECT_FALSE(r.Header("missing"));
  EXPECT_EQ(r.headers.size(), 3u);
  EXPECT_TRUE(r.body.empty());
}

TEST(HttpServer, HeadIsAnsweredWithTheHeadAlone) {
  auto s = StartOrDie(TestOptions(), [](Request r, std::shared_ptr<Responder> responder) {
    if (r.path == "/stream") {
      responder->StartStream(200, "text/event-stream");
      EXPECT_TRUE(responder->Write("data: 1\n\n"));
      EXPECT_TRUE(responder->End());
    } else {
      responder->Send(200, "text/plain", "hello " + r.method);
    }
  });
  Client c(s->port());
  c.Send(
      "HEAD / HTTP/1.1\r\nHost: h\r\n\r\nHEAD /stream HTTP/1.1\r\nHost: h\r\n\r\n"
      "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  const std::string want =
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n\r\nhello GET";
  EXPECT_EQ(c.Read(want.size()), want);
}

TEST(HttpServer, PostRoundTripLeavesOutHeadersThatCouldSplitTheAnswer) {
  auto s = StartOrDie(TestOptions(), [](Request r, std::shared_ptr<Responder> responder) {
    responder->Send(201, "application/json", r.body,
                    {{"Bad\r\nX-Evil", "1"},
                     {"X-Evil2", "a\r\nb"},
                     {"content-length", "99"},
                     {"Connection", "keep-alive"},
                     {"X-Ok", "yes"}});
  });
  Client c(s->port());
  c.Send("POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Length: 7\r\n\r\n{\"a\":1}");
  EXPECT_EQ(c.ReadAnswer(),
            "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nX-Ok: yes\r\n"
            "Content-Length: 7\r\n\r\n{\"a\":1}");
}

TEST(HttpServer, KeepAliveServesTwoRequestsOnOneConnectionThenHonoursClose) {
  auto s = StartOrDie(TestOptions(), [](Request r, std::shared_ptr<Responder> responder) {
    responder->Send(200, "text/plain", r.path);
  });
  Client c(s->port());
  c.Send("GET /one HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(c.ReadAnswer(),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\n/one");
  c.Send("GET /two HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(c.ReadAnswer(),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\n/two");
  c.Send("GET /three HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(c.ReadToEof(),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n"
            "Connection: close\r\n\r\n/three");
  EXPECT_TRUE(c.eof());
  const HttpCounters n = s->counters();
  EXPECT_EQ(n.accepted, 1u);
  EXPECT_EQ(n.requests, 3u);
}

TEST(HttpServer, PipelinedRequestsAreAnsweredInOrder) {
  std::vector<std::thread> threads;
  auto s = StartOrDie(TestOptions(), [&](Request r, std::shared_ptr<Responder> responder) {
    if (r.path == "/slow") {  // answered late, from another thread
      threads.emplace_back([responder] {
        std::this_thread::sleep_for(50ms);
        responder->Send(200, "text/plain", "slow");
      });
    } else {
      responder->Send(200, "text/plain", r.path.substr(1));
    }
  });
  Client c(s->port());
  c.Send(
      "GET /slow HTTP/1.1\r\nHost: h\r\n\r\nGET /a HTTP/1.1\r\nHost: h\r\n\r\n"
      "POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nxy");
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: ";
  const std::string want = head + "4\r\n\r\nslow" + head + "1\r\n\r\na" + head + "1\r\n\r\nb";
  EXPECT_EQ(c.Read(want.size()), want);
  s->Stop();  // joins the loop thread, which filled `threads`
  for (auto& t : threads) t.join();
}

TEST(HttpServer, ChunkedRequestBodyIsDechunkedAndItsTrailersLeftOut) {
  Inbox inbox;
  auto s = StartOrDie(TestOptions(), [&](Request r, std::shared_ptr<Responder> responder) {
    responder->Send(200, "text/plain", r.body);
    inbox.Put(std::move(r), responder);
  });
  Client c(s->port());
  c.Send("POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel");
  std::this_thread::sleep_for(20ms);
  c.Send("lo\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n");
  EXPECT_EQ(c.ReadAnswer(),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\nhello world");
  ASSERT_TRUE(inbox.Wait(0));
  EXPECT_FALSE(inbox.RequestAt(0).Header("x-trailer"));
}

TEST(HttpServer, ServerSentEventsArriveEventByEventFromAnotherThread) {
  Inbox inbox;
  auto s = StartOrDie(TestOptions(), [&](Request r, std::shared_ptr<Responder> responder) {
    if (r.path == "/events")
      inbox.Put(std::move(r), responder);
    else
      responder->Send(200, "text/plain", "after");
  });
  Client c(s->port());
  c.Send("POST /events HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n");
  auto stream = inbox.Wait(0);
  ASSERT_TRUE(stream);
  // This thread is not the loop's.
  ASSERT_TRUE(stream->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}}));
  EXPECT_EQ(c.ReadUntil("\r\n\r\n"),
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            "Transfer-Encoding: chunked\r\n\r\n");
  // Each event is on the wire before the next is written.
  const std::vector<std::string> events = {"data: {\"n\":1}\n\n", "data: {\"n\":22}\n\n",
                                           "data: [DONE]\n\n"};
  const std::vector<std::string> framed = {"f\r\ndata: {\"n\":1}\n\n\r\n",
                                           "10\r\ndata: {\"n\":22}\n\n\r\n",
                                           "e\r\ndata: [DONE]\n\n\r\n"};
  for (size_t i = 0; i < events.size(); ++i) {
    ASSERT_TRUE(stream->Write(events[i]));
    EXPECT_EQ(c.Read(framed[i].size()), framed[i]);
  }
  EXPECT_TRUE(stream->Write(""));
  ASSERT_TRUE(stream->End());
  EXPECT_EQ(c.Read(5), "0\r\n\r\n");
  EXPECT_FALSE(stream->Write("late"));
  EXPECT_FALSE(stream->End());
  EXPECT_FALSE(stream->Send(200, "text/plain", "twice"));
  EXPECT_FALSE(stream->cancelled());
  // The connection is kept for the next request.
  c.Send("GET /next HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(c.ReadAnswer(),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nafter");
}

TEST(HttpServer, WriteBeforeStartStreamIsRefused) {
  Inbox inbox;
  auto s = StartOrDie(TestOptions(), [&](Request r, std::shared_ptr<Responder> responder) {
    inbox.Put(std::move(r), responder);
  });
  Client c(s->port());
  c.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  auto r = inbox.Wait(0);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->Write("x"));
  EXPECT_FALSE(r->End());
  std::thread other([r] { r->Send(503, "text/plain", "busy", {{"Retry-After", "2"}}); });
  other.join();
  EXPECT_EQ(c.ReadAnswer(),
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 2\r\n"
            "Content-Length: 4\r\n\r\nbusy");
}

TEST(HttpServer, ClientDisconnectMidStreamCancelsTheAnswer) {
  Inbox inbox;
  std::atomic<int> cancels{0};
  auto s = StartOrDie(TestOptions(), [&](Request r, std::shared_ptr<Responder> responder) {
    responder->OnCancel([&] { cancels++; });
    responder->StartStream(200, "text/event-stream");
    inbox.Put(std::move(r), responder);
  });
  auto c = std::make_unique<Client>(s->port());
  c->Send("GET /stream HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_FALSE(c->ReadUntil("\r\n\r\n").empty());
  auto r = inbox.Wait(0);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->Write("data: 1\n\n"));
  EXPECT_FALSE(r->cancelled());
  const auto gone = Clock::now();
  c.reset();
  EXPECT_TRUE(WaitFor([&] { return r->cancelled(); }, 500ms));
  EXPECT_LT(Clock::now() - gone, 500ms);
  EXPECT_TRUE(WaitFor([&] { return cancels.load() == 1; }));
  EXPECT_FALSE(r->Write("data: 2\n\n"));
  EXPECT_FALSE(r->End());
  // A callback set after the cancel runs at once.
  bool late = false;
  r->OnCancel([&] { late = true; });
  EXPECT_TRUE(late);
  EXPECT_EQ(cancels.load(), 1);
  EXPECT_TRUE(WaitFor([&] { return s->counters().open == 0; }));
}

// With reading paused (pipelined bytes fill their buffer) a client that
// leaves is still noticed, and the writes after it fail.
TEST(HttpServer, AClientGoneWhileReadingIsPausedIsNoticed) {
  HttpOptions o = TestOptions();
  o.max_header_bytes = 256;
  Inbox inbox;
  auto s = StartOrDie(o, [&](Request r, std::shared_ptr<Responder> responder) {
    responder->StartStream(200, "text/event-stream");
    inbox.Put(std::move(r), responder);
  });
  auto c = std::make_unique<Client>(s->port());
  c->Send("GET / HTTP/1.1\r\nHost: h\r\n\r\nGET /next HTTP/1.1\r\nX-Pad: " +
          std::string(4096, 'p'));
  auto r = inbox.Wait(0);
  ASSERT_TRUE(r);
  EXPECT_FALSE(c->ReadUntil("\r\n\r\n").empty());
  c.reset();
  EXPECT_TRUE(WaitFor([&] {
    r->Write("data: x\n\n");
    return r->cancelled();
  }));
  EXPECT_FALSE(r->Write("data: y\n\n"));
}

// A write to a peer that has reset raises SIGPIPE in the writing thread:
// the loop's thread blocks it, so that it cannot end the process (the
// server does not change the process's signal dispositions).
TEST(HttpServer, TheLoopThreadBlocksSigpipe) {
  std::atomic<int> blocked{-1};
  auto s = StartOrDie(TestOptions(), [&](Request, std::shared_ptr<Responder> responder) {
    sigset_t set;
    pthread_sigmask(SIG_BLOCK, nullptr, &set);
    blocked = sigismember(&set, SIGPIPE);
    responder->Send(200, "text/plain", "ok");
  });
  Client c(s->port());
  c.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_FALSE(c.ReadAnswer().empty());
  EXPECT_EQ(blocked.load(), 1);
}

TEST(HttpServer, BodyTooLargeIs413BeforeTheBodyOrWhenTheChunksPassIt) {
  HttpOptions o = TestOptions();
  o.max_body_bytes = 100;
  std::atomic<int> handled{0};
  auto s = StartOrDie(o, [&](Request, std::shared_ptr<Responder> responder) {
    handled++;
    responder->Send(200, "text/plain", "ok");
  });
  const std::string too_large =
      ErrorAnswer("HTTP/1.1 413 Payload Too Large", "the request's body is longer than 100 bytes");
  {
    Client c(s->port());
    c.Send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000000\r\n\r\n");
    EXPECT_EQ(c.ReadToEof(), too_large);
    EXPECT_TRUE(c.eof());
  }
  {
    Client c(s->port());
    c.Send("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n");
    c.Send("3c\r\n" + std::string(60, 'a') + "\r\n");
    c.Send("3c\r\n" + std::string(60, 'b') + "\r\n");
    EXPECT_EQ(c.ReadToEof(), too_large);
    EXPECT_TRUE(c.eof());
  }
  {
    Client c(s->port());  // at the limit: served
    c.Send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n" + std::string(100, 'x'));
    EXPECT_EQ(c.ReadAnswer(),
              "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok");
  }
  EXPECT_EQ(handled.load(), 1);
  EXPECT_EQ(s->counters().errors, 2u);
}

TEST(HttpServer, MalformedRequestsAre400AndTheServerServesOn) {
  HttpOptions o = TestOptions();
  o.max_header_bytes = 1024;
  auto s = StartOrDie(o, [](Request, std::shared_ptr<Responder> responder) {
    responder->Send(200, "text/plain", "ok");
  });
  struct Case {
    std::string request, status, message;
  };
  const std::vector<Case> cases = {
      {"GARBAGE / HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request",
       "malformed request: invalid HTTP method"},
      {"GET / HTTP/1.1\r\nNo colon here\r\n\r\n", "HTTP/1.1 400 Bad Request",
       "malformed request: invalid character in header"},
      {"GET / HTTP/1.x\r\n\r\n", "HTTP/1.1 400 Bad Request",
       "malformed request: invalid HTTP version"},
      {"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
       "HTTP/1.1 400 Bad Request", "malformed request: unexpected content-length header"},
      // Both framings, or chunked not last: the requests of a smuggling attack.
      {"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
       "HTTP/1.1 400 Bad Request", "malformed request: unexpected content-length header"},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
       "HTTP/1.1 400 Bad Request", "malformed request: request has invalid transfer-encoding"},
      {"GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
       "HTTP/1.1 400 Bad Request", "protocol upgrades and CONNECT are not served"},
      {"CONNECT example.com:443 HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request",
       "protocol upgrades and CONNECT are not served"},
      {"GET / HTTP/1.1\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n",
       "HTTP/1.1 431 Request Header Fields Too Large",
       "the request's headers are longer than 1024 bytes"},
      {std::string("GET / HTTP/1.1\r\nX: a\0b\r\n\r\n", 27), "HTTP/1.1 400 Bad Request",
       "malformed request: invalid character in header"},
  };
  for (const Case& k : cases) {
    Client c(s->port());
    c.Send(k.request);
    EXPECT_EQ(c.ReadToEof(), ErrorAnswer(k.status, k.message)) << k.request;
    EXPECT_TRUE(c.eof());
  }
  Client c(s->port());
  c.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(c.ReadAnswer(),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok");
  EXPECT_EQ(s->counters().requests, 1u);
}

TEST(HttpServer, AHandlerThatThrowsIsAnswered500) {
  auto s = StartOrDie(TestOptions(), [](Request, std::shared_ptr<Responder>) {
    throw std::runtime_error("no \"model\"");
  });
  Client c(s->port());
  c.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  const std::string body =
      R"({"error":{"message":"no \"model\"","type":"server_error","param":null,"code":null}})";
  EXPECT_EQ(c.ReadAnswer(),
            "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
            "Content-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body);
}

TEST(HttpServer, ConnectionsPastTheCapWhenEveryOneIsBusyAre503AndClosed) {
  HttpOptions o = TestOptions();
  o.max_connections = 2;
  Inbox inbox;  // the requests to /hold, never answered: their connections stay busy
  auto s = StartOrDie(o, [&](Request r, std::shared_ptr<Responder> responder) {
    if (r.path == "/hold")
      inbox.Put(std::move(r), responder);
    else
      responder->Send(200, "text/plain", "ok");
  });
  const std::string ok =
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
  auto a = std::make_unique<Client>(s->port());
  Client b(s->port());
  a->Send("GET /hold HTTP/1.1\r\nHost: h\r\n\r\n");
  ASSERT_TRUE(inbox.Wait(0));
  b.Send("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nab");  // begun: busy too
  ASSERT_TRUE(WaitFor([&] { return s->counters().open == 2; }));
  std::this_thread::sleep_for(50ms);  // b's bytes read by the loop
  {
    Client over(s->port());
    const std::string body =
        R"({"error":{"message":"the server has 2 connections open, the most it serves at once","type":"server_error","param":null,"code":null}})";
    EXPECT_EQ(over.ReadToEof(),
              "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
              "Retry-After: 1\r\nContent-Length: " +
                  std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
    EXPECT_TRUE(over.eof());
    EXPECT_EQ(s->counters().refused, 1u);
    // While `over` stays open the server lingers on it (up to a second):
    // with a second refused one held too, a third is closed without a word.
    Client refused(s->port());
    EXPECT_FALSE(refused.ReadUntil("\r\n\r\n").empty());
    Client flood(s->port());
    EXPECT_EQ(flood.ReadToEof(), "");
    EXPECT_TRUE(flood.eof());
  }
  EXPECT_EQ(s->counters().refused, 3u);
  EXPECT_EQ(s->counters().displaced, 0u);
  a.reset();
  ASSERT_TRUE(WaitFor([&] { return s->counters().open == 1; }));
  Client c(s->port());
  c.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(c.ReadAnswer(), ok);
  b.Send("cde");
  EXPECT_EQ(b.ReadAnswer(), ok);
  EXPECT_EQ(s->counters().accepted, 3u);
}

// Idle keep-alive connections up to the cap do not shut a new client out:
// the one idle longest is closed to make room, the busy ones are left be.
TEST(HttpServer, ANewConnectionAtTheCapTakesTheLongestIdleOnesPlace) {
  HttpOptions o = TestOptions();
  o.max_connections = 3;
  Inbox inbox;
  auto s = StartOrDie(o, [&](Request r, std::shared_ptr<Responder> responder) {
    if (r.path == "/hold")
      inbox.Put(std::move(r), responder);
    else
      responder->Send(200, "text/plain", "ok");
  });
  const std::string ok =
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
  Client busy(s->port());
  busy.Send("GET /hold HTTP/1.1\r\nHost: h\r\n\r\n");
  ASSERT_TRUE(inbox.Wait(0));
  // Two idle keep-alive connections: `older` served first, so idle longer.
  Client older(s->port()), newer(s->port());
  for (Client* c : {&older, &newer}) {
    c->Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    EXPECT_EQ(c->ReadAnswer(), ok);
  }
  Client fresh(s->port());
  fresh.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(fresh.ReadAnswer(), ok);
  EXPECT_EQ(older.ReadToEof(), "");  // closed without a word, as an idle timeout closes it
  EXPECT_TRUE(older.eof());
  newer.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(newer.ReadAnswer(), ok);
  auto held = inbox.Wait(0);
  ASSERT_TRUE(held);
  EXPECT_FALSE(held->cancelled());
  EXPECT_TRUE(held->Send(200, "text/plain", "ok"));
  EXPECT_EQ(busy.ReadAnswer(), ok);
  // Now `fresh` is the longest idle: answered before `newer` was again, and `busy`.
  Client last(s->port());
  last.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(last.ReadAnswer(), ok);
  EXPECT_EQ(fresh.ReadToEof(), "");
  EXPECT_TRUE(fresh.eof());
  for (Client* c : {&newer, &busy}) {
    c->Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    EXPECT_EQ(c->ReadAnswer(), ok);
  }
  const HttpCounters n = s->counters();
  EXPECT_EQ(n.displaced, 2u);
  EXPECT_EQ(n.refused, 0u);
  EXPECT_EQ(n.accepted, 5u);
  EXPECT_EQ(n.open, 3u);
}

TEST(HttpServer, SlowAndIdleClientsTimeOut) {
  HttpOptions o = TestOptions();
  o.header_timeout = 100ms;
  o.body_timeout = 100ms;
  o.idle_timeout = 150ms;
  auto s = StartOrDie(o, [](Request, std::shared_ptr<Responder> responder) {
    responder->Send(200, "text/plain", "ok");
  });
  {  // headers trickling in (slowloris)
    Client c(s->port());
    const auto start = Clock::now();
    c.Send("GET / HTTP/1.1\r\n");
    std::this_thread::sleep_for(40ms);
    c.Send("Host: h\r\n");
    std::this_thread::sleep_for(40ms);
    c.Send("X-A: b\r\n");
    EXPECT_EQ(c.ReadToEof(), ErrorAnswer("HTTP/1.1 408 Request Timeout",
                                         "the request's headers did not arrive in time"));
    EXPECT_TRUE(c.eof());
    EXPECT_GE(Clock::now() - start, 90ms);  // libuv counts whole milliseconds
  }
  {  // a body that stops short
    Client c(s->port());
    c.Send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc");
    EXPECT_EQ(c.ReadToEof(), ErrorAnswer("HTTP/1.1 408 Request Timeout",
                                         "the request's body did not arrive in time"));
    EXPECT_TRUE(c.eof());
  }
  {  // nothing sent: closed without a word
    Client c(s->port());
    const auto start = Clock::now();
    EXPECT_EQ(c.ReadToEof(), "");
    EXPECT_TRUE(c.eof());
    EXPECT_GE(Clock::now() - start, 140ms);
  }
  {  // idle after an answer
    Client c(s->port());
    c.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    EXPECT_EQ(c.ReadToEof(),
              "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok");
    EXPECT_TRUE(c.eof());
  }
  EXPECT_EQ(s->counters().errors, 2u);
}

// libuv runs timers before it polls: after the loop thread stalls (here a
// handler that blocks it, as a loaded machine would), a connection's idle
// timer fires with its request already waiting. It is served, not closed.
TEST(HttpServer, AStalledLoopDoesNotCloseAPeerWhoseRequestWaits) {
  HttpOptions o = TestOptions();
  o.idle_timeout = 100ms;
  auto s = StartOrDie(o, [](Request r, std::shared_ptr<Responder> responder) {
    if (r.path == "/stall") std::this_thread::sleep_for(400ms);
    responder->Send(200, "text/plain", "ok");
  });
  Client staller(s->port()), waiting(s->port());
  ASSERT_TRUE(WaitFor([&] { return s->counters().open == 2; }));
  staller.Send("GET /stall HTTP/1.1\r\nHost: h\r\n\r\n");
  std::this_thread::sleep_for(200ms);  // the loop is in the handler; the idle timer is due
  waiting.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  const std::string ok =
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
  EXPECT_EQ(waiting.ReadAnswer(), ok);
  EXPECT_EQ(staller.ReadAnswer(), ok);
}

TEST(HttpServer, AStreamOutlastsEveryTimeout) {
  HttpOptions o = TestOptions();
  o.header_timeout = o.body_timeout = o.idle_timeout = 50ms;
  Inbox inbox;
  auto s = StartOrDie(o, [&](Request r, std::shared_ptr<Responder> responder) {
    responder->StartStream(200, "text/event-stream");
    inbox.Put(std::move(r), responder);
  });
  Client c(s->port());
  c.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  auto r = inbox.Wait(0);
  ASSERT_TRUE(r);
  EXPECT_FALSE(c.ReadUntil("\r\n\r\n").empty());
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(r->Write("data: late\n\n"));
  EXPECT_EQ(c.Read(17), "c\r\ndata: late\n\n\r\n");
  EXPECT_FALSE(r->cancelled());
  EXPECT_TRUE(r->End());
}

TEST(HttpServer, AClientThatDoesNotReadIsClosedPastTheQueueBound) {
  HttpOptions o = TestOptions();
  o.max_queued_bytes = 64 << 10;
  Inbox inbox;
  auto s = StartOrDie(o, [&](Request r, std::shared_ptr<Responder> responder) {
    responder->StartStream(200, "text/event-stream");
    inbox.Put(std::move(r), responder);
  });
  Client c(s->port(), 4096);
  c.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  auto r = inbox.Wait(0);
  ASSERT_TRUE(r);
  const std::string chunk(16 << 10, 'x');
  size_t written = 0;
  while (written < (256u << 20) && r->Write(chunk)) {
    written += chunk.size();
    if (written % (1 << 20) == 0) std::this_thread::sleep_for(1ms);  // let the loop drain
  }
  EXPECT_LT(written, 256u << 20) << "Write never refused";
  EXPECT_TRUE(r->cancelled());
  EXPECT_FALSE(r->Write(chunk));
  EXPECT_TRUE(WaitFor([&] { return s->counters().open == 0; }));
}

TEST(HttpServer, Http10StreamsAreFramedByTheClose) {
  auto s = StartOrDie(TestOptions(), [](Request r, std::shared_ptr<Responder> responder) {
    if (r.path == "/stream") {
      responder->StartStream(200, "text/event-stream");
      responder->Write("data: a\n\n");
      responder->End();
    } else {
      responder->Send(200, "text/plain", "ok");
    }
  });
  {
    Client c(s->port());
    c.Send("GET /stream HTTP/1.0\r\n\r\n");
    EXPECT_EQ(c.ReadToEof(),
              "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: "
              "close\r\n\r\ndata: a\n\n");
    EXPECT_TRUE(c.eof());
  }
  {
    Client c(s->port());
    c.Send("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    EXPECT_EQ(c.ReadAnswer(),
              "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
              "Connection: keep-alive\r\n\r\nok");
    c.Send("GET / HTTP/1.0\r\n\r\n");
    EXPECT_EQ(c.ReadToEof(),
              "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
              "Connection: close\r\n\r\nok");
    EXPECT_TRUE(c.eof());
  }
}

TEST(HttpServer, ExpectContinueIsAnswered) {
  auto s = StartOrDie(TestOptions(), [](Request r, std::shared_ptr<Responder> responder) {
    responder->Send(200, "text/plain", r.body);
  });
  Client c(s->port());
  c.Send("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
  EXPECT_EQ(c.ReadUntil("\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  c.Send("hello");
  EXPECT_EQ(c.ReadAnswer(),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello");
}

TEST(HttpServer, StopClosesOpenConnectionsAndCancelsTheirAnswers) {
  Inbox inbox;
  auto s = StartOrDie(TestOptions(), [&](Request r, std::shared_ptr<Responder> responder) {
    responder->StartStream(200, "text/event-stream");
    inbox.Put(std::move(r), responder);
  });
  Client idle(s->port()), partial(s->port()), streaming(s->port());
  partial.Send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nab");
  streaming.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  auto r = inbox.Wait(0);
  ASSERT_TRUE(r);
  EXPECT_FALSE(streaming.ReadUntil("\r\n\r\n").empty());
  ASSERT_TRUE(WaitFor([&] { return s->counters().open == 3; }));
  s->Stop();
  EXPECT_TRUE(r->cancelled());
  for (Client* c : {&idle, &partial, &streaming}) {
    EXPECT_EQ(c->ReadToEof(500ms), "");
    EXPECT_TRUE(c->eof());
  }
  s.reset();  // the Responder outlives the server
  EXPECT_FALSE(r->Write("data: x\n\n"));
  EXPECT_FALSE(r->End());
}

// curl, if installed (scripts/deps.sh installs it): what a real client reads.
std::string Curl(const std::string& args) {
  std::string out;
  FILE* p = popen(("curl -sS --max-time 10 " + args + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

TEST(HttpServer, CurlReadsTheStreamAndUploadsChunkedAndWithExpect) {
  if (access("/usr/bin/curl", X_OK) != 0) GTEST_SKIP() << "curl is not installed";
  std::vector<std::thread> threads;
  auto s = StartOrDie(TestOptions(), [&](Request r, std::shared_ptr<Responder> responder) {
    if (r.path == "/events") {
      responder->StartStream(200, "text/event-stream");
      threads.emplace_back([responder] {
        for (const char* e : {"data: 1\n\n", "data: 2\n\n", "data: [DONE]\n\n"}) {
          std::this_thread::sleep_for(5ms);
          responder->Write(e);
        }
        responder->End();
      });
    } else {
      responder->Send(200, "text/plain",
                      std::to_string(r.body.size()) + " " +
                          std::string(r.Header("expect").value_or("-")) + " " +
                          std::string(r.Header("transfer-encoding").value_or("-")) + " " +
                          (r.body == std::string(r.body.size(), 'z') ? "same" : "different"));
    }
  });
  const std::string url = "http://" + s->address();
  EXPECT_EQ(Curl("-N " + url + "/events"), "data: 1\n\ndata: 2\n\ndata: [DONE]\n\n");
  const std::string file = testing::ScratchDir() + "/body";
  std::ofstream(file) << std::string(2 << 20, 'z');
  EXPECT_EQ(Curl("-H 'Expect: 100-continue' --data-binary @" + file + " " + url + "/up"),
            "2097152 100-continue - same");
  EXPECT_EQ(Curl("-H 'Transfer-Encoding: chunked' --data-binary @" + file + " " + url + "/up"),
            "2097152 100-continue chunked same");
  s->Stop();  // joins the loop thread, which filled `threads`
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace waste::http
