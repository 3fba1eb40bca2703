// Gem Drift: the Kiln load benchmark's Phaser game. Gems from an atlas drift and spin over a
// background; their places come from a level file. Nothing is drawn before every asset is in.
(function () {
  'use strict';
  var W = window.innerWidth;
  var H = window.innerHeight;
  var gems = [];
  var label;
  var frames = 0;

  function preload() {
    this.load.image('background', 'assets/background.png');
    this.load.atlas('gems', 'assets/atlas.png', 'assets/atlas.json');
    this.load.json('level', 'assets/level.json');
    this.load.on('loaderror', function (file) {
      document.body.dataset.state = 'error';
      document.body.dataset.error = 'could not load ' + file.src;
    });
  }

  function create() {
    var bg = this.add.image(W / 2, H / 2, 'background');
    bg.setDisplaySize(W, H);
    var level = this.cache.json.get('level');
    var sx = W / level.width;
    var sy = H / level.height;
    level.sprites.forEach(function (s) {
      var img = this.add.image(s.x * sx, s.y * sy, 'gems', s.frame);
      img.setScale(0.6);
      gems.push({ img: img, vx: s.vx, vy: s.vy, spin: s.spin });
    }, this);
    label = this.add.text(12, 12, 'Gem Drift', { fontFamily: 'sans-serif', fontSize: '20px', color: '#ffffff' });
    document.body.dataset.state = 'ready'; // every asset is in: the benchmark's "ready"
  }

  function update(time, delta) {
    var dt = Math.min(delta, 100) / 1000;
    for (var i = 0; i < gems.length; i++) {
      var g = gems[i];
      g.img.x += g.vx * dt;
      g.img.y += g.vy * dt;
      if (g.img.x < 0 || g.img.x > W) g.vx = -g.vx;
      if (g.img.y < 0 || g.img.y > H) g.vy = -g.vy;
      g.img.rotation += g.spin * dt;
    }
    frames++;
    if (label && frames % 30 === 0) label.setText('Gem Drift  ' + Math.round(this.game.loop.actualFps) + ' fps');
  }

  new Phaser.Game({
    type: Phaser.AUTO,
    width: W,
    height: H,
    backgroundColor: '#13202e',
    banner: false,
    audio: { noAudio: true },
    scene: { preload: preload, create: create, update: update },
  });
})();
